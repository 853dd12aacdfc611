// Package pubsub carries notifications between the masters and lockproxy's
// subscribers: one logical message per publish, to every subscriber of
// every lockproxy on the master set.
//
// A Hub holds one subscribed connection per master (AUTH as configured,
// reconnected with back-off, every subscription made again on each new
// connection). A client connection drives it: Subscribe and Unsubscribe
// per channel, pattern or shard channel, Remove when it closes, and its
// Deliver receives each logical message once. The first local subscriber of
// a name makes the hub subscribe it on every master, the last one leaving
// unsubscribes it. The hub also carries lockproxy's own events (Emit,
// Listen), makes keyspace notifications from them, and counts PUBLISH's
// receivers (Receivers). It writes no client-visible text: framing replies
// in RESP2 or RESP3 is the proxy's job.
//
// # Once per publish
//
// A message published on the masters — by a lock script that lockproxy runs
// on every master, or by a client's PUBLISH that it sends to every master —
// reaches the hub once per master. Three facts make the copies
// recognizable: a master sends the messages of a subscription on one
// connection in the order it ran the publishes; it runs each publish at
// most once; and the copies of one message have the same channel and
// payload. The rule, per subscription (channel, pattern or shard channel)
// and payload hash:
//
//   - a copy from master m belongs to the oldest remembered message that m
//     still owes a copy of;
//   - if m owes none, the copy is a new logical message: it is delivered
//     once a quorum of the confirmed masters sent a copy, or HoldBack after
//     this first one (hold.go says why), and remembered as owed by every
//     other master on which the subscription is confirmed or whose
//     connection is up (its confirmation may still be on its way while it
//     already publishes; one that sends no copy is like a master the
//     message was not published on);
//   - a message delivered on HoldBack with fewer copies than its quorum is
//     delivered again by the copy that completes the quorum, if that copy
//     comes while the message is remembered and was published after the
//     early delivery (told by a PING: fence.go says how, and why: the lone
//     copy of a release a minority published must not take the real
//     release's copies for its own); a quorum completed by copies
//     published before it, read late, delivers nothing more;
//   - a message is forgotten when every owing master delivered, when a
//     master that owes it loses its connection (what it sends after it is
//     back was published after), after DedupWindow, or, oldest first, when
//     MaxDedupEntries are remembered.
//
// While no message is forgotten early, the number of first deliveries of
// one payload equals the largest number of copies any single master sent:
// a new delivery needs a master that owes nothing, that is one that sent a
// copy for every earlier delivery; and each master's copies go to distinct
// messages. So a message published on every master is delivered exactly
// once, also when identical payloads follow each other closely (Redisson
// publishes the same "0" on every unlock of a lock): two publishes are two
// copies from each master, two deliveries. A message waits for a quorum of
// copies (the quorum's latency), never longer than HoldBack, then for the
// waiting messages a master published before it (order.go; each of those
// waits at most HoldBack after its own first copy); one that did not have
// its quorum by HoldBack is delivered a second time when the masters that
// complete the quorum publish it later, so a message published on every
// master is delivered twice exactly when fewer than a quorum of masters
// had run the publish by the early delivery and a quorum has within
// DedupWindow (a release that reached most masters late; the first
// delivery woke its waiters early). Copies that were only read late (a
// slow hub, a slow link from a master to the hub) change nothing. The
// payload is
// remembered as a 64-bit hash, so the memory per message is fixed (a held
// message keeps its payload until delivered, MaxHeldBytes in all).
//
// What a subscriber sees, the rest of the time (a wake-up is a hint to
// retry, never a grant: a missed or doubled one costs a retry, not safety):
//
//   - A minority of masters paused or slow: the others' copies make the
//     quorum and deliver the message once; the late copies are dropped.
//     A majority that runs the publish more than HoldBack late (paused,
//     or slow links from the publishing proxy): delivered on HoldBack, and
//     again when a quorum of masters has run it.
//   - A master down, killed or restarted: the others deliver. It is
//     subscribed again when it is back, and owes nothing of before. A
//     message is missed only if no master that published it is connected.
//   - A master that lags by more than DedupWindow (5s): its late copies are
//     delivered again. A master silent for ReadTimeout (3s, paused or cut
//     off) loses its connection, and with it its backlog, so a stall does
//     not end in old messages delivered again.
//   - Messages published on different subsets of masters within the window
//     (a lock whose successive grants held different quorums, each unlock
//     publishing only where it found the lock): a master's copy of the
//     second may be taken for its missing copy of the first, so the second
//     is delivered by another master's copy, a moment later. Any two
//     quorums share a master, so two such messages are both delivered;
//     three can come as two, the count being the largest any master sent.
//   - A proxy restart: its subscribers' connections end with it, as with a
//     Redis restart; clients subscribe again and miss what was published
//     meanwhile. Other proxies see nothing of it. Its next run has a new
//     InstanceID, so its events are never taken for the old run's.
//   - A subscriber subscribing while a message is published gets it or not,
//     as with Redis; nothing arrives before the first master confirmed.
//   - A message longer than MaxPayload is skipped (counted in Stats).
//
// # lockproxy's events
//
// Emit publishes an event (a lock granted with its TTL, extended, released,
// a signal list pushed) on EventsChannel on every master through the
// injected Publisher; every hub on the master set hands it to its Listen
// callbacks once. Events carry an id, the emitting hub's InstanceID and a
// sequence number, so their dedup is exact: the first copy from any master
// is delivered, later ones are dropped (the last 4096 ids of each of up to
// MaxEventOrigins proxies are remembered). It takes one master that got
// the PUBLISH and is connected, so a minority of masters down changes
// nothing. The emitting hub delivers its own events at once.
//
// # Keyspace notifications
//
// __keyspace@0__ and __keyevent@0__ notifications of lock keys are made by
// each hub from the events, as its notify-keyspace-events flags ask
// (SetKeyspaceEvents), with Redis's names: set and expire for a grant,
// expire for an extension, del for a release, lpush for a signal, and
// expired ttl plus the drift allowance after the last set or expire,
// unless a del came first. Masters' own notifications are never passed on,
// and subscriptions that can match only keyspace channels are not made on
// the masters. docs/pubsub.md argues this against using the masters'
// notifications.
//
// # Bounds
//
// Every resource is bounded by a Config field, each with its default and
// error: distinct channels and patterns (MaxChannels, 10,000; each is one
// subscription per master), subscriptions per subscriber
// (MaxPerSubscriber, MaxChannels/10: 1,000, so that one subscriber
// cannot take every channel) and in all (MaxSubscriptions, 100,000),
// patterns, which every PUBLISH is matched against (MaxPatterns, 1,000;
// MaxPatternsPerSubscriber, 100; MaxPatternLen, 256 bytes; glob.go),
// remembered messages (MaxDedupEntries, 65,536, about 100 bytes each),
// message size (MaxPayload, 1 MiB), event origins (MaxEventOrigins,
// 1,024, 512 bytes each) and scheduled expiries (MaxExpiries, 100,000). A
// subscriber's backlog is its own: Deliver never blocks, and the
// connection cuts itself off over its output limit.
//
// # Concurrency
//
// One mutex orders everything: a master's message is decided and fanned
// out under it, as are subscription changes and events. Deliver and Listen
// callbacks therefore run with it held: they must not block and must not
// call the Hub, and the proxy must not call the Hub while holding a lock
// those callbacks take. In exchange, every subscriber sees messages in the
// hub's order and none after its Unsubscribe returned.
package pubsub
