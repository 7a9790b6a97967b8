// Command tenure is the Tenure server (`tenure serve`) and an etcdctl-like
// client for humans (get, put, del, watch, lease, member, endpoint, compact).
package main

import "os"

func main() {
	os.Exit(execute(newApp(), os.Args[1:]))
}
