//go:build !unix

package main

// openFilesLimit is unknown here: max_clients is used as configured.
func openFilesLimit() uint64 { return 0 }
