package proxy

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
	"unsafe"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/quorum"
)

// EVAL, EVALSHA and SCRIPT: catalogued scripts forwarded to every master.

// cmdEval forwards a catalogued script to every master and counts votes.
func cmdEval(s *Server, c *client, args [][]byte) {
	t0 := batching.Now()
	isSHA := len(args[0]) == 7
	numKeys, err := strconv.Atoi(string(args[2]))
	if err != nil || numKeys < 0 {
		c.errorf("ERR value is not an integer or out of range")
		return
	}
	if numKeys > len(args)-3 {
		c.errorf("ERR Number of keys can't be greater than number of args")
		return
	}
	var sc *Script
	if isSHA {
		if sc = s.scripts.lookup(c, args[1]); sc == nil {
			c.errorf("%s No matching script. Please use EVAL.", errPrefixNoScript)
			s.cfg.Metrics.scriptMiss()
			return
		}
	} else {
		if sc = s.cfg.Catalog.Match(args[1]); sc == nil {
			sum := sha1.Sum(args[1])
			c.errorf("ERR unknown script (sha1 %s): lockproxy forwards only catalogued lock scripts and never sends others to the masters; register it under [[scripts]] in config.toml (body, kind, vote, ttl_arg) — see README \"Custom scripts\"", hex.EncodeToString(sum[:]))
			s.cfg.Metrics.scriptMiss()
			return
		}
		// The client's own sha1 (of its formatting) now answers EVALSHA.
		s.scripts.loadBody(args[1], sc)
	}
	if sc.Force && s.cfg.DenyForce {
		c.errorf("ERR script %q takes the lock whoever holds it (force acquisition), and force acquisition is switched off: allow_force_acquire = false in config.toml", sc.Name)
		return
	}
	s.cfg.Metrics.scriptHit()
	keys := args[3 : 3+numKeys]
	argv := args[3+numKeys:]
	ttl, msg := s.scriptTTLs(sc, argv)
	if msg != "" {
		c.errorf("%s", msg)
		return
	}
	r := quorum.NewRequest()
	r.Kind, r.Agg, r.Rule, r.Combine = sc.Kind, quorum.AggVote, sc.Yes, sc.Combine
	r.NKeys, r.NoReply, r.NoIsNoop, r.T0 = numKeys, sc.NoReply, sc.NoIsNoop, t0
	r.TTL = ttl
	// The catalogued body is what every master has loaded: forward by its
	// sha1. Keys and the token alias the encoded command.
	size := 64 + len(sc.SHA1)
	for _, a := range args[3:] {
		size += len(a) + 16
	}
	r.Cmd = quorum.AppendEvalSHA(r.CmdBuffer(size), sc.SHA1, keys, argv)
	if sc.RunAs != "" {
		maxTTL := strconv.AppendInt(nil, s.cfg.Engine.Config().MaxTTL.Milliseconds(), 10)
		r.Cmd = quorum.AppendEvalSHA(nil, sc.RunAs, keys, append(append([][]byte(nil), argv...), maxTTL))
	}
	if sc.Body == "" && !isSHA {
		// A custom script registered by sha1 only is not preloaded on the
		// masters: forward the client's own text (it hashes to that sha1).
		r.Cmd = batching.AppendCommand(nil, append([][]byte{[]byte("EVAL"), args[1], args[2]}, args[3:]...)...)
	}
	if numKeys == 1 { // reads too: after this connection's earlier commands on the key
		k := argsIn(r.Cmd, 3)
		r.Key = unsafe.String(unsafe.SliceData(k), len(k))
	}
	if sc.Kind == quorum.Acquire && sc.TokenArg > 0 {
		if sc.TokenArg > len(argv) {
			c.errorf("ERR script %q expects the lock token in ARGV[%d], but only %d ARGV were given", sc.Name, sc.TokenArg, len(argv))
			return
		}
		for i := 0; i < numKeys; i++ {
			r.UndoKeys = append(r.UndoKeys, argsIn(r.Cmd, 3+i))
		}
		r.UndoToken = argsIn(r.Cmd, 3+numKeys+sc.TokenArg-1)
	}
	s.submit(c, r, renderReply)
}

func cmdScript(s *Server, c *client, args [][]byte) {
	switch strings.ToLower(string(args[1])) {
	case "load":
		if len(args) != 3 {
			c.errorf("ERR wrong number of arguments for 'script|load' command")
			return
		}
		sc := s.cfg.Catalog.Match(args[2])
		if sc == nil {
			sum := sha1.Sum(args[2])
			c.errorf("ERR unknown script (sha1 %s): lockproxy loads only catalogued lock scripts; register it under [[scripts]] in config.toml — see README \"Custom scripts\"", hex.EncodeToString(sum[:]))
			return
		}
		c.bulk([]byte(s.scripts.loadBody(args[2], sc)))
	case "exists":
		n := len(args) - 2
		found := make([]bool, n)
		for i := range found {
			found[i] = s.scripts.lookup(c, args[2+i]) != nil
		}
		c.local(func(b []byte) []byte {
			b = appendArrayHeader(b, n)
			for _, f := range found {
				if f {
					b = appendInt(b, 1)
				} else {
					b = appendInt(b, 0)
				}
			}
			return b
		})
	case "flush":
		if len(args) > 3 || (len(args) == 3 && !strings.EqualFold(string(args[2]), "sync") && !strings.EqualFold(string(args[2]), "async")) {
			c.errorf("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
			return
		}
		// This connection's view only: see scriptTable.
		s.scripts.flush(c)
		c.status("OK")
	default:
		c.errorf("ERR unknown subcommand '%s'. lockproxy supports SCRIPT LOAD, EXISTS and FLUSH", clip(args[1]))
	}
}
