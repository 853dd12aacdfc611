// Package analyze decides what a Lua lock script does, from its body alone.
//
// It runs the script in an embedded Lua 5.1 VM (gopher-lua) against an
// in-memory model of the keys the script touches, over a set of probe states
// (lock key absent, held by the caller's token, held by another token, as a
// string, a hash or a sorted set, re-entered, several keys), under two clocks
// and twice per probe, and infers from the effects and replies the script's
// lock semantics: its kind, which KEYS/ARGV carry the lock key, the token and
// the TTL (and the TTL's unit), the yes and not-acquired replies, the lock's
// data type and the undo of a failed acquisition. A script that fits no class
// exactly, or that does anything the model cannot vouch for, is refused with
// an error that names the probe, the command and the argument at fault.
//
// Analysis is deterministic, never touches the network and is bounded in
// instructions, bytes and time (see Options); Analyze is safe for concurrent
// use, each call with its own VM, so a caller may run it off the request
// path once per distinct script and cache the result. The package knows
// nothing of the quorum engine or of RESP clients: Semantics is a plain
// description that the proxy translates. docs/analyzer.md describes the
// probes and every refusal.
package analyze
