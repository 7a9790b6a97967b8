// Package server boots a Tenure member: it validates Config, opens the store,
// starts the raft node, the state machine, the watch hub and the gRPC/HTTP
// listeners, and wires them together. It contains no logic of its own beyond
// that wiring.
package server
