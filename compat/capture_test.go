package compat

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// libScriptsDir holds, one file per script, the exact bodies the libraries
// of libDrivers send: the corpus of the script analyzer's tests. The file
// name is <library>_<name>.lua; its README.md says what each one does.
var libScriptsDir = filepath.Join("..", "proxy", "analyze", "testdata", "libs")

// sentScript is a script that a client sent, as MONITOR saw it.
type sentScript struct {
	body    string // "" when only seen by sha1 (EVALSHA)
	numkeys string
}

// monitorScripts runs MONITOR on e's first master until the returned
// function is called, which returns the scripts sent meanwhile by sha1.
func (e *env) monitorScripts(t *testing.T) func() map[string]sentScript {
	t.Helper()
	conn, err := net.Dial("tcp", e.masters[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("MONITOR = %q, %v", line, err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimSuffix(line, "\r\n")
		}
	}()
	return func() map[string]sentScript {
		t.Helper()
		defer conn.Close()
		var b [8]byte
		rand.Read(b[:])
		end := "compat-monitor-end-" + hex.EncodeToString(b[:])
		if _, err := e.masters[0].Do("ECHO", end); err != nil {
			t.Fatal(err)
		}
		scripts := map[string]sentScript{}
		timeout := time.After(10 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatal("MONITOR connection closed before its end marker")
				}
				if strings.Contains(line, end) {
					return scripts
				}
				addScript(t, scripts, line)
			case <-timeout:
				t.Fatal("MONITOR: end marker not seen after 10s")
			}
		}
	}
}

// addScript records the script of one MONITOR line, if it is an EVAL or an
// EVALSHA sent by a client: +1700000000.000000 [0 127.0.0.1:5000] "EVAL" "body" "1" …
func addScript(t *testing.T, scripts map[string]sentScript, line string) {
	t.Helper()
	_, rest, ok := strings.Cut(line, "] ")
	if !ok || strings.Contains(line, " lua] ") {
		return
	}
	args, err := unrepr(rest)
	if err != nil {
		t.Fatalf("MONITOR line %q: %v", line, err)
	}
	if len(args) < 3 {
		return
	}
	switch strings.ToUpper(args[0]) {
	case "EVAL":
		scripts[sha1Of(args[1])] = sentScript{body: args[1], numkeys: args[2]}
	case "EVALSHA":
		sha := strings.ToLower(args[1])
		if _, seen := scripts[sha]; !seen {
			scripts[sha] = sentScript{numkeys: args[2]}
		}
	}
}

// unrepr splits MONITOR's arguments, each quoted as Redis's sdscatrepr
// writes it (\\ \" \n \r \t \a \b \xHH), into their raw bytes.
func unrepr(s string) ([]string, error) {
	var args []string
	for i := 0; i < len(s); {
		if s[i] == ' ' {
			i++
			continue
		}
		if s[i] != '"' {
			return nil, fmt.Errorf("argument at %d does not start with a quote", i)
		}
		var arg strings.Builder
		for i++; ; i++ {
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated argument")
			}
			c := s[i]
			if c == '"' {
				i++
				break
			}
			if c != '\\' {
				arg.WriteByte(c)
				continue
			}
			if i++; i >= len(s) {
				return nil, fmt.Errorf("escape at the end")
			}
			switch s[i] {
			case 'n':
				arg.WriteByte('\n')
			case 'r':
				arg.WriteByte('\r')
			case 't':
				arg.WriteByte('\t')
			case 'a':
				arg.WriteByte('\a')
			case 'b':
				arg.WriteByte('\b')
			case 'x':
				if i+2 >= len(s) {
					return nil, fmt.Errorf("short \\x escape")
				}
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					return nil, fmt.Errorf("bad \\x escape %q", s[i+1:i+3])
				}
				arg.WriteByte(byte(v))
				i += 2
			default: // \\ and \"
				arg.WriteByte(s[i])
			}
		}
		args = append(args, arg.String())
	}
	return args, nil
}

// checkCapturedScripts: the scripts sent and the files of libScriptsDir are
// the same set, by sha1.
func checkCapturedScripts(t *testing.T, sent map[string]sentScript) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(libScriptsDir, "*.lua"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in %s: %v", libScriptsDir, err)
	}
	kept := map[string]string{} // sha1 → file name
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		kept[sha1Of(string(b))] = filepath.Base(f)
	}
	var shas []string
	for sha := range sent {
		shas = append(shas, sha)
	}
	sort.Strings(shas)
	for _, sha := range shas {
		if name, ok := kept[sha]; ok {
			t.Logf("sent %s (sha1 %s, numkeys %s)", name, sha, sent[sha].numkeys)
			continue
		}
		t.Errorf("a library sent a script that %s does not keep: sha1 %s, numkeys %s, body:\n%s", libScriptsDir, sha, sent[sha].numkeys, sent[sha].body)
	}
	for sha, name := range kept {
		if _, ok := sent[sha]; !ok {
			t.Errorf("%s (sha1 %s) was sent by no library", name, sha)
		}
	}
}
