package compat

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runDriven runs a client script (Python or Node) that uses a lock library
// against lockproxy and stops at checkpoints so that the test can look at
// the masters themselves. The script writes one line per checkpoint on
// stdout and waits for "ok" on stdin:
//
//	CHECK held KEY TOKEN      KEY holds TOKEN on a quorum, then on every master
//	CHECK granted KEY TOKEN   KEY holds TOKEN on a quorum, and nothing else on
//	                          any master: a grant that raced a release made
//	                          through another proxy (checkGranted)
//	CHECK gone KEY            KEY is on no master
//	CHECK pttl KEY LO HI      PTTL KEY is within [LO, HI] ms on a quorum
//	CHECK keys PREFIX K1 K2…  every master holds exactly K1 K2… under PREFIX
//	CHECK shorten KEY MS      sets PTTL KEY to MS on every master, as if time
//	                          had passed, so that an extend visibly moves it
//
// TOKEN is a string lock's value, or the members (fields) of a sorted-set
// (hash) lock joined by ",".
//
// A failed check fails the test and kills the script. Other stdout lines
// are logged, and returned. The script asserts what the library returns itself and exits
// non-zero with a message on stderr when something is wrong; the test
// fails then with that message.
func (e *env) runDriven(t *testing.T, timeout time.Duration, name string, args ...string) (lines []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	sc := bufio.NewScanner(stdout)
	checks := 0
	var failed error
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "CHECK" {
			t.Logf("%s: %s", name, line)
			lines = append(lines, line)
			continue
		}
		checks++
		if failed = e.checkpoint(t, f[1:]); failed != nil {
			failed = fmt.Errorf("checkpoint %d (%s): %w", checks, strings.Join(f[1:], " "), failed)
			cancel()
			break
		}
		if _, err := stdin.Write([]byte("ok\n")); err != nil {
			failed = fmt.Errorf("answering checkpoint %d: %w", checks, err)
			break
		}
	}
	stdin.Close()
	err = cmd.Wait()
	switch {
	case failed != nil:
		t.Fatalf("%v\n%s stderr:\n%s", failed, name, stderr.String())
	case ctx.Err() != nil:
		t.Fatalf("%s %s: killed after %v (checkpoints passed: %d)\nstderr:\n%s", name, strings.Join(args, " "), timeout, checks, stderr.String())
	case err != nil:
		t.Fatalf("%s %s: %v (checkpoints passed: %d)\nstderr:\n%s", name, strings.Join(args, " "), err, checks, stderr.String())
	case checks == 0:
		t.Fatalf("%s checked nothing on the masters", name)
	}
	t.Logf("%s: %d checkpoints passed in %v", name, checks, time.Since(start).Round(time.Millisecond))
	return lines
}

func (e *env) checkpoint(t *testing.T, f []string) error {
	t.Helper()
	argc := map[string]int{"held": 2, "granted": 2, "gone": 1, "pttl": 3, "shorten": 2}
	if n, ok := argc[f[0]]; ok && len(f)-1 != n {
		return fmt.Errorf("%s takes %d arguments", f[0], n)
	}
	switch f[0] {
	case "held":
		return e.checkHeld(t, f[1], f[2])
	case "granted":
		return e.checkGranted(t, f[1], f[2])
	case "gone":
		return e.checkGone(t, f[1])
	case "pttl":
		lo, err1 := strconv.ParseInt(f[2], 10, 64)
		hi, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("pttl bounds %q %q are not integers", f[2], f[3])
		}
		return e.checkPTTL(t, f[1], lo, hi)
	case "shorten":
		if _, err := strconv.ParseInt(f[2], 10, 64); err != nil {
			return fmt.Errorf("shorten to %q: not an integer", f[2])
		}
		for i := range e.masters {
			if v := e.do(t, i, "PEXPIRE", f[1], f[2]); v != "1" {
				return fmt.Errorf("PEXPIRE %s %s on master %d = %s", f[1], f[2], i, v)
			}
		}
		return nil
	case "keys":
		if len(f) < 2 {
			return fmt.Errorf("keys needs a prefix")
		}
		return e.checkKeys(t, f[1], f[2:]...)
	}
	return fmt.Errorf("unknown checkpoint %q", f[0])
}
