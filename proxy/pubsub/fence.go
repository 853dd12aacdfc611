package pubsub

// A message delivered on HoldBack short of a quorum of copies went out
// early: fewer than a quorum of masters had let the lock go, and a waiter
// woken by it was refused. Its later copies are of two kinds, which the
// dedup cannot tell apart by payload:
//
//   - copies of the same publish that were on their way: published before
//     the early delivery, read after it (a hub slower than HoldBack to read
//     its connections, a slow link from master to hub). The message was
//     delivered; once is right.
//   - copies published after the early delivery: the same publish reaching
//     most masters late (slow links from the releasing proxy, paused
//     masters), or another publish of the same payload that the dedup
//     takes for the copies owed. The second is how a release published by
//     a minority alone (a re-entrant lock one level short there: the
//     holder's first unlock, which only counts down on the quorum, deletes
//     it on that master) swallowed the real release: all its copies went
//     to the lone message as owed, and the waiters never heard it. Either
//     way the release ran on a quorum only now, so the message is delivered
//     again, by the copy that completes the quorum (each copy says that
//     its master let the lock go: a retry wins from then on).
//
// The hub tells them apart with a PING on the connection of every master
// that still owes a copy, queued at the early delivery: a master sends a
// subscription's messages and its replies in the order it ran the
// commands, so a copy read before the PONG was published before the master
// ran the PING, and one read after it was published after the early
// delivery. The quorum completed by a copy of the first kind delivers
// nothing more, and the message is not delivered again later. A publish
// that ran between the early delivery and the master's PING (the PING's
// time on the wire) counts as of the first kind: that narrow window is
// left. A PING's answer is the reply in its place among the commands
// (master.go, answered): a pong, or an error while the master loads its
// dataset.

// late is what an entry delivered on HoldBack short of its quorum keeps
// until its quorum comes.
type late struct {
	need  int                // copies that make its quorum
	fence [maxMasters]uint64 // per master: the PONG after which a copy was published after the early delivery
}

// fence queues a PING, unless one is queued and not written yet, on the
// connection of every master in owe (each is connected: a master that
// loses its connection owes nothing), and returns their numbers. h.mu is
// held.
func (h *Hub) fence(owe uint16, need int) *late {
	l := &late{need: need}
	for i, m := range h.masters {
		if owe&(1<<i) != 0 && m.conn != nil {
			l.fence[i] = m.ping()
		}
	}
	return l
}

const pingCmd = "*1\r\n$4\r\nPING\r\n"

// ping queues a PING on the live connection unless one is queued already,
// and returns the number of the PONG that will answer it. h.mu is held.
func (m *master) ping() uint64 {
	if !m.pingQueued {
		m.out = append(m.out, pingCmd...)
		m.sent++
		m.pingAt = append(m.pingAt, m.sent)
		m.pings++
		m.pingQueued = true
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
	return m.pings
}
