package proxy

import (
	"strconv"
	"strings"
)

// CLIENT TRACKING and CLIENT CACHING. lockproxy has no client-side
// caching: a lock's value served from a client's cache would never be
// asked of the quorum, and invalidations would need every write to every
// lock key, on every proxy, announced to every tracking client. What it
// accepts is the one mode in which Redis tracks nothing unless asked:
// OPTIN, with CLIENT CACHING YES refused. No key is then ever tracked, so
// no invalidation is ever owed, and the connection behaves exactly as on
// Redis for every command it may send. That is rueidis's default
// (ClientOption without DisableCache): its connections, and lock code on
// them that does not read through the cache, work unchanged. OPTOUT, BCAST
// and REDIRECT (rueidislock with caching: it waits for invalidations) are
// refused, saying how to turn caching off.

const (
	errTrackingMode = "ERR CLIENT TRACKING is supported in OPTIN mode only, with CLIENT CACHING YES refused: lockproxy has no client-side caching, every read is a quorum read; turn caching off in the client (rueidis: ClientOption{DisableCache: true})"
	errCachingYes   = "ERR CLIENT CACHING YES is not supported: lockproxy has no client-side caching, every read is a quorum read; read without the cache (rueidis: Do, not DoCache), or turn caching off in the client (rueidis: ClientOption{DisableCache: true})"
	errCachingOff   = "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"
	errCachingNo    = "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
)

// clientTracking is CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p]...
// [BCAST] [OPTIN] [OPTOUT] [NOLOOP], parsed as Redis 7.0 parses it.
func clientTracking(c *client, args [][]byte) {
	if len(args) < 3 {
		c.errorf("ERR wrong number of arguments for 'client|tracking' command")
		return
	}
	var on bool
	switch strings.ToLower(string(args[2])) {
	case "on":
		on = true
	case "off":
	default:
		c.errorf("ERR syntax error")
		return
	}
	var optin, optout, bcast, redirect, prefix bool
	for j := 3; j < len(args); j++ {
		more := j+1 < len(args)
		switch opt := strings.ToLower(string(args[j])); {
		case opt == "redirect" && more:
			j++
			if _, err := strconv.ParseInt(string(args[j]), 10, 64); err != nil {
				c.errorf("ERR value is not an integer or out of range")
				return
			}
			redirect = true
		case opt == "bcast":
			bcast = true
		case opt == "optin":
			optin = true
		case opt == "optout":
			optout = true
		case opt == "noloop":
		case opt == "prefix" && more:
			j++
			prefix = true
		default:
			c.errorf("ERR syntax error")
			return
		}
	}
	if !on {
		c.tracking = false
		c.status("OK")
		return
	}
	switch {
	case prefix && !bcast:
		c.errorf("ERR PREFIX option requires BCAST mode to be enabled")
	case optin && optout:
		c.errorf("ERR You can't specify both OPTIN mode and OPTOUT mode")
	case bcast && (optin || optout):
		c.errorf("ERR OPTIN and OPTOUT are not compatible with BCAST")
	case !optin || redirect || bcast:
		c.errorf("%s", errTrackingMode)
	default:
		c.tracking = true
		c.status("OK")
	}
}

// clientCaching is CLIENT CACHING YES|NO: YES would track the next read.
func clientCaching(c *client, args [][]byte) {
	if len(args) != 3 {
		c.errorf("ERR wrong number of arguments for 'client|caching' command")
		return
	}
	switch opt := strings.ToLower(string(args[2])); {
	case !c.tracking:
		c.errorf("%s", errCachingOff)
	case opt == "yes":
		c.errorf("%s", errCachingYes)
	case opt == "no":
		c.errorf("%s", errCachingNo) // tracking here is OPTIN only
	default:
		c.errorf("ERR syntax error")
	}
}
