package compat

import "testing"

// TestLibsThroughLockproxy runs the drivers of libs_test.go through the
// shared lockproxy in front of 5 masters, with the same assertions as
// against plain Redis. It needs lockproxy to understand scripts by what
// they do (issue 13); until then lockproxy refuses the libraries' scripts
// (docs/compat.md, "Libraries waiting for script understanding"), so it is
// built only with -tags analyzer. Remove the tag when the analyzer lands.
func TestLibsThroughLockproxy(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, d := range libDrivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			d.run(t, e)
		})
	}
}
