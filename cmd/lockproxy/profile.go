package main

import (
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a CPU profile of the run to path (-cpuprofile),
// for `go tool pprof` (or as a default.pgo for a profile-guided build).
// stop ends the profile and closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
