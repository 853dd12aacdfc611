package pubsub

import "strings"

// What a channel or pattern name says: whether it is a keyspace
// notification channel (served by this proxy alone), what a pattern could
// match, and which names clients may not publish on.

const (
	keyspacePrefix = "__keyspace@"
	keyeventPrefix = "__keyevent@"
)

func isKeyspace(channel string) bool {
	return strings.HasPrefix(channel, keyspacePrefix) || strings.HasPrefix(channel, keyeventPrefix)
}

// literalPrefix is the part of a pattern before its first special byte:
// every channel it matches starts with it.
func literalPrefix(pattern string) string {
	if i := strings.IndexAny(pattern, `*?[\`); i >= 0 {
		return pattern[:i]
	}
	return pattern
}

// localOnly reports whether a subscription can only ever match keyspace
// notification channels: a channel that is one, or a pattern whose literal
// prefix is one.
func localOnly(kind Kind, name string) bool {
	switch kind {
	case Channel:
		return isKeyspace(name)
	case Pattern:
		return isKeyspace(literalPrefix(name))
	}
	return false
}

// mayMatchKeyspace reports whether a pattern could match a keyspace
// notification channel, so that synthesizing one notification tries a
// handful of patterns, not every pattern the hub holds.
func mayMatchKeyspace(pattern string) bool {
	p := literalPrefix(pattern)
	for _, k := range []string{keyspacePrefix, keyeventPrefix} {
		if strings.HasPrefix(k, p) || strings.HasPrefix(p, k) {
			return true
		}
	}
	return false
}

// PatternWork estimates what each master spends matching a PUBLISH on a
// channel of n bytes against the patterns this hub subscribed there
// (held, or dropped and not yet confirmed gone): Redis's matcher takes
// about n steps per pattern that starts with a wildcard, and this counts
// every pattern so.
func (h *Hub) PatternWork(n int) int64 {
	h.mu.Lock()
	p := len(h.patterns) + len(h.leavingPats)
	h.mu.Unlock()
	return int64(p) * int64(n)
}

// Reserved reports whether a client may not PUBLISH on channel: the
// events channel, where a forged event would wake waiters for nothing.
func (h *Hub) Reserved(channel string) bool { return channel == h.cfg.EventsChannel }
