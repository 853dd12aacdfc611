package proxy

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/quorum"
)

// EVAL, EVALSHA and SCRIPT: catalogued scripts forwarded to every master.

// cmdEval runs a lock script on every master and counts votes: a
// catalogued one, or one the analyzer understood.
func cmdEval(s *Server, c *client, args [][]byte) {
	t0 := evloop.Now()
	n, ok := resp.ParseRedisInt(args[2])
	if !ok {
		c.errorf("ERR value is not an integer or out of range")
		return
	}
	if n < 0 {
		c.errorf("ERR Number of keys can't be negative")
		return
	}
	numKeys := int(min(n, int64(len(args))))
	if numKeys > len(args)-3 {
		c.errorf("ERR Number of keys can't be greater than number of args")
		return
	}
	if tooManyKeys(c, args[0], numKeys) {
		return
	}
	sc := s.scriptFor(c, args)
	if sc == nil {
		return // refused, or deferred until understood
	}
	if sc.Force && s.cfg.DenyForce {
		what := "takes the lock whoever holds it (force acquisition)"
		if sc.Kind == quorum.Release {
			what = "deletes the lock whoever holds it (force release)"
		}
		c.errorf("ERR script %q %s, and force acquisition is switched off: allow_force_acquire = false in config.toml", sc.Name, what)
		return
	}
	s.cfg.Metrics.ScriptHit()
	if sc.Local != nil {
		rep, resp3 := *sc.Local, c.resp3
		c.local(func(b []byte) []byte { return resp.AppendReply(b, rep, resp3) })
		return
	}
	keys := args[3 : 3+numKeys]
	argv := args[3+numKeys:]
	if sc.Batch != nil {
		s.evalBatch(c, sc, keys, argv, t0)
		return
	}
	if msg := checkScriptArgs(sc, keys, argv); msg != "" {
		c.errorf("%s", msg)
		return
	}
	if sc.ValuePTTL {
		s.submit(c, s.cfg.Engine.ValuePTTL(keys[0], t0), renderReply)
		c.charge += valueReplyCharge // it returns the value
		return
	}
	ttl, msg := s.scriptTTLs(sc, keys, argv)
	if msg != "" {
		c.errorf("%s", msg)
		return
	}
	s.submit(c, s.cfg.Engine.Script(sc.Op(), keys, argv, ttl, t0), renderReply)
	if sc.Kind == quorum.Read {
		c.charge += valueReplyCharge // it may return the value
	}
	s.scriptEvent(c, sc, keys, argv, ttl)
}

// scriptFor finds the script an EVAL or EVALSHA runs, or answers the
// client and returns nil: NOSCRIPT for an unknown sha1; for an unknown
// body, the analyzer's verdict (a connection that must not block gets
// c.deferred and runs the command again once the verdict is in).
func (s *Server) scriptFor(c *client, args [][]byte) *catalog.Script {
	if len(args[0]) == 7 { // EVALSHA
		sc := s.scripts.Lookup(args[1], c.scriptsFlushed)
		if sc == nil {
			c.errorf("%s No matching script. Please use EVAL.", errPrefixNoScript)
			s.cfg.Metrics.ScriptMiss()
		}
		return sc
	}
	return s.scriptForBody(c, args[1])
}

// scriptForBody finds the script of a body sent by EVAL or SCRIPT LOAD:
// catalogued, or understood by the analyzer; or it answers the client (the
// refusal) or defers the command until the verdict is in, and returns nil.
// A script found is loaded: its sha1 answers EVALSHA from then on.
func (s *Server) scriptForBody(c *client, body []byte) *catalog.Script {
	sc := s.cfg.Catalog.Match(body)
	if sc == nil {
		sum := sha1.Sum(body)
		sha := hex.EncodeToString(sum[:])
		var err error
		var known bool
		if sc, err, known = s.understood.Lookup(sha); !known {
			if !s.awaitVerdict(c, body, sha) {
				return nil
			}
			sc, err, _ = s.understood.Lookup(sha)
		}
		if err != nil {
			c.errorf("ERR unknown script (sha1 %s): lockproxy does not run it, because %s. Scripts are understood by what they do (README \"Scripts\"); register it under [[scripts]] in config.toml if it is a lock script", sha, strings.TrimPrefix(err.Error(), "script refused: "))
			s.cfg.Metrics.ScriptMiss()
			return nil
		}
	}
	if sc.Body == "" {
		// A custom script registered by sha1 only: the client's text is
		// its body (it hashes to that sha1), which the masters load.
		sc = sc.WithBody(body)
	}
	// The client's own sha1 (of its formatting) now answers EVALSHA.
	s.scripts.LoadBody(body, sc)
	return sc
}

// awaitVerdict starts or joins the analysis of body and reports whether
// its verdict is in: at once for a connection that may block (it waits),
// never for one on the event loop, which is resumed when it is.
func (s *Server) awaitVerdict(c *client, body []byte, sha string) bool {
	var then func()
	if c.resume != nil {
		then = c.resume
	}
	job, err := s.understood.Start(body, sha, then)
	if err != nil {
		c.errorf("ERR unknown script (sha1 %s): %s", sha, err)
		return false
	}
	if c.resume != nil {
		c.deferred, c.analysis = true, job
		return false
	}
	<-job.Done()
	return true
}

// checkScriptArgs checks what a call must pass for sc to mean what it was
// understood to: enough KEYS and ARGV (for an understood script, exactly
// the counts it was analyzed with), database 0 where it SELECTs, a
// publish command where it takes a command name from ARGV. It returns the
// client's error, or "".
func checkScriptArgs(sc *catalog.Script, keys, argv [][]byte) string {
	switch {
	case len(keys) < sc.MinKeys:
		return fmt.Sprintf("ERR script %q reads KEYS[%d], but only %d KEYS were given", sc.Name, sc.MinKeys, len(keys))
	case len(argv) < sc.MinArgs:
		return fmt.Sprintf("ERR script %q reads ARGV[%d], but only %d ARGV were given", sc.Name, sc.MinArgs, len(argv))
	case sc.ExactArgs && len(argv) != sc.MinArgs:
		return fmt.Sprintf("ERR script %q was understood from runs with %d ARGV, but %d were given: a script may act otherwise on another count (#ARGV), so lockproxy runs it only with the count it analyzed", sc.Name, sc.MinArgs, len(argv))
	case sc.MaxKeys > 0 && len(keys) > sc.MaxKeys:
		return fmt.Sprintf("ERR script %q was understood from runs with %d and %d KEYS, but %d were given: a script may act otherwise on another count (#KEYS), so lockproxy runs it only with the counts it analyzed", sc.Name, sc.MinKeys, sc.MaxKeys, len(keys))
	case sc.TokenArg > 0 && !sc.TokenInKeys && sc.TokenArg > len(argv):
		return fmt.Sprintf("ERR script %q expects the lock token in ARGV[%d], but only %d ARGV were given", sc.Name, sc.TokenArg, len(argv))
	case sc.TokenArg > 0 && sc.TokenInKeys && sc.TokenArg > len(keys):
		return fmt.Sprintf("ERR script %q expects the lock token in KEYS[%d], but only %d KEYS were given", sc.Name, sc.TokenArg, len(keys))
	case sc.TokenArg > 0 && !sc.TokenInKeys && slices.Contains(sc.UndoExtra, string(argv[sc.TokenArg-1])),
		sc.TokenArg > 0 && sc.TokenInKeys && slices.Contains(sc.UndoExtra, string(keys[sc.TokenArg-1])):
		return fmt.Sprintf("ERR script %q writes its own marker %q beside the token: a token equal to it is not told apart from it", sc.Name, sc.UndoExtra)
	case sc.TokenArg > 0 && !sc.TokenInKeys && slices.Contains(sc.TokenNot, string(argv[sc.TokenArg-1])),
		sc.TokenArg > 0 && sc.TokenInKeys && slices.Contains(sc.TokenNot, string(keys[sc.TokenArg-1])):
		return fmt.Sprintf("ERR script %q has a constant equal to the lock token given, which it may write beside the token (a marker member, a hash or JSON field): lockproxy cannot tell such a token from that constant in another holder's lock, so use another token (a random one)", sc.Name)
	case sc.KeyArg > len(argv):
		return fmt.Sprintf("ERR script %q expects the lock key in ARGV[%d], but only %d ARGV were given", sc.Name, sc.KeyArg, len(argv))
	case sc.DBArg > 0 && (sc.DBArg > len(argv) || string(argv[sc.DBArg-1]) != "0"):
		return fmt.Sprintf("ERR script %q selects the database in ARGV[%d]: lockproxy serves database 0 only, so it must be 0", sc.Name, sc.DBArg)
	}
	for _, i := range sc.CommandArgs {
		if i > len(argv) || !(equalFoldASCII(argv[i-1], "publish") || equalFoldASCII(argv[i-1], "spublish")) {
			return fmt.Sprintf("ERR script %q runs ARGV[%d] as a command: lockproxy accepts publish or spublish there", sc.Name, i)
		}
	}
	return ""
}

func cmdScript(s *Server, c *client, args [][]byte) {
	switch strings.ToLower(string(args[1])) {
	case "load":
		if len(args) != 3 {
			c.errorf("ERR wrong number of arguments for 'script|load' command")
			return
		}
		// Understood as EVAL's body is: refused with the same reason.
		if s.scriptForBody(c, args[2]) == nil {
			return
		}
		sum := sha1.Sum(args[2])
		c.bulk([]byte(hex.EncodeToString(sum[:])))
	case "exists":
		n := len(args) - 2
		found := make([]bool, n)
		for i := range found {
			found[i] = s.scripts.Lookup(args[2+i], c.scriptsFlushed) != nil
		}
		c.local(func(b []byte) []byte {
			b = resp.AppendArrayHeader(b, n)
			for _, f := range found {
				if f {
					b = resp.AppendInt(b, 1)
				} else {
					b = resp.AppendInt(b, 0)
				}
			}
			return b
		})
	case "flush":
		if len(args) > 3 || (len(args) == 3 && !equalFoldASCII(args[2], "sync") && !equalFoldASCII(args[2], "async")) {
			c.errorf("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
			return
		}
		// This connection's view only: see catalog.Table.
		c.scriptsFlushed = s.scripts.Flush()
		c.status("OK")
	default:
		c.errorf("ERR unknown subcommand '%s'. lockproxy supports SCRIPT LOAD, EXISTS and FLUSH", clip(args[1]))
	}
}
