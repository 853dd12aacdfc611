//go:build !unix

package compat

import "os"

// lockFileExclusive does nothing where flock is missing: concurrent npm ci
// runs are then the developer's to avoid.
func lockFileExclusive(f *os.File) (unlock func(), err error) { return func() {}, nil }
