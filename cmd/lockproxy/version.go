package main

import "runtime/debug"

// version and commit are set at build time (make build):
//
//	-ldflags "-X main.version=1.2.3 -X main.commit=abc1234"
//
// Without -X, the commit comes from the Go build info when the build
// recorded it (not with -buildvcs=false).
var (
	version = "0.1.0-dev"
	commit  = ""
)

// commitID is the commit set at build time, else the one in the build
// info, else "unknown".
func commitID() string {
	if commit != "" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

func runtimeVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return ""
}
