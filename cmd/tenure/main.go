// Command tenure is the Tenure server (`tenure serve`) and an etcdctl-like
// client for humans (get, put, del, watch, lease, member, endpoint, compact).
package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent trades some heap for CPU: the write path allocates many
// short-lived protobuf messages, and on a small machine the collector's CPU
// is taken from consensus and disk work (measured: about 20% less server CPU
// per put than GOGC=100). An explicit GOGC in the environment wins.
const defaultGCPercent = 200

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	os.Exit(execute(newApp(), os.Args[1:]))
}
