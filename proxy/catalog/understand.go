package catalog

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/proxy/analyze"
)

// Scripts the catalog does not know are understood by what they do: the
// analyzer runs each distinct body once, off the request path of every
// connection (the one that sent it waits for it), and the outcome — a
// Script to run, or the reason it is refused — is kept by sha1, the least
// recently used going first. A bounded number of analyses run at once, and
// a bounded number wait; past that, a new script is refused as "busy" and
// the client may send it again.
//
// An Understander is safe for concurrent use.
type Understander struct {
	analyze func(ctx context.Context, body []byte) (*analyze.Semantics, error)
	maxTTL  time.Duration
	drift   float64
	running chan struct{} // a token per analysis running
	max     int           // analyses running or waiting, at most

	mu       sync.Mutex               // protects the fields below
	inflight map[string]*Analysis     // sha1 → the analysis under way
	known    map[string]*list.Element // sha1 → its element in lru
	lru      list.List                // of *understoodScript, most recently used first
	keep     int                      // the most kept
	bytes    int                      // heldBytes of the scripts kept
	maxBytes int                      // bounds bytes (MaxHeldScriptBytes; tests set it lower)
	ctx      context.Context          // ends the analyses at shutdown
	cancel   context.CancelFunc
}

type understoodScript struct {
	sha   string
	sc    *Script
	err   error // the refusal
	bytes int   // heldBytes(sc), or the refusal's text
}

// Analysis is one analysis under way; done is closed when sc or err is
// set, after every waiter registered before was told.
type Analysis struct {
	done    chan struct{}
	sc      *Script
	err     error
	waiters []func()
	// wanted counts the clients waiting for it (Start) that have not left
	// (Leave); at 0 it is not started, or stopped (ctx cancelled), and
	// nothing is recorded. Under Understander.mu.
	wanted  int
	settled bool
	ctx     context.Context
	cancel  context.CancelFunc
}

// Bounds of the Understander.
const (
	defaultAnalysesAtOnce = 2    // the machine's cores are the masters' and the clients' too
	defaultAnalysesQueued = 64   // waiting for a turn
	defaultUnderstoodKept = 4096 // scripts (or refusals) kept by sha1
)

// NewUnderstander returns an Understander of scripts for an engine with
// this max_ttl and clock drift factor (quorum.Config.MaxTTL, DriftFactor):
// a script that sets a TTL over maxTTL, or one too short to leave validity
// after the drift allowance, is refused or answered locally.
func NewUnderstander(maxTTL time.Duration, drift float64) *Understander {
	ctx, cancel := context.WithCancel(context.Background())
	u := &Understander{
		analyze: func(ctx context.Context, body []byte) (*analyze.Semantics, error) {
			return analyze.AnalyzeContext(ctx, body, analyze.Options{})
		},
		maxTTL:   maxTTL,
		drift:    drift,
		running:  make(chan struct{}, defaultAnalysesAtOnce),
		max:      defaultAnalysesAtOnce + defaultAnalysesQueued,
		inflight: map[string]*Analysis{},
		known:    map[string]*list.Element{},
		keep:     defaultUnderstoodKept,
		maxBytes: MaxHeldScriptBytes,
		ctx:      ctx,
		cancel:   cancel,
	}
	return u
}

// errBusy refuses a new script while too many are being understood.
var errBusy = &refusal{msg: "lockproxy is understanding too many new scripts at once; send it again in a moment"}

// refusal is why a script is not run; the proxy tells the client "ERR
// unknown script (sha1 …): <msg>".
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

// maxRefusalText bounds a refusal's text, which is kept with the script's
// sha1 and sent to every client that runs it. The analyzer cuts each part
// of its own texts shorter (analyze.MaxRefusalField); this also bounds
// texts made here from a script's semantics.
const maxRefusalText = 2048

// Lookup returns what is known of sha (lower-case hex): a script, or the
// reason it is refused; known is false while it was never analyzed (or
// was forgotten).
func (u *Understander) Lookup(sha string) (sc *Script, refused error, known bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e := u.known[sha]
	if e == nil {
		return nil, nil, false
	}
	u.lru.MoveToFront(e)
	us := e.Value.(*understoodScript)
	return us.sc, us.err, true
}

// Start analyzes body (whose sha1 is sha) unless that is under way, and
// calls then (if not nil) once the outcome is known, from the analysis's
// goroutine; Lookup has it by then. It returns the analysis, or an error
// the client reads when too many are under way.
func (u *Understander) Start(body []byte, sha string, then func()) (*Analysis, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if j := u.inflight[sha]; j != nil {
		if then != nil {
			j.waiters = append(j.waiters, then)
		}
		j.wanted++
		return j, nil
	}
	if len(u.inflight) >= u.max {
		return nil, errBusy
	}
	j := &Analysis{done: make(chan struct{}), wanted: 1}
	j.ctx, j.cancel = context.WithCancel(u.ctx)
	if then != nil {
		j.waiters = append(j.waiters, then)
	}
	u.inflight[sha] = j
	go u.run(append([]byte(nil), body...), sha, j)
	return j, nil
}

// Leave says that one client that Start returned j to no longer waits
// for it (its connection closed). When none does, j is not run, or is
// stopped if running, its slot is free at once, and no verdict is
// recorded (the next client that sends the script has it analyzed again).
func (u *Understander) Leave(j *Analysis) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if j.settled || j.wanted == 0 {
		return
	}
	if j.wanted--; j.wanted > 0 {
		return
	}
	for sha, x := range u.inflight {
		if x == j {
			delete(u.inflight, sha)
			break
		}
	}
	j.cancel()
}

// Done is closed once the analysis's outcome is known (Lookup has it).
func (j *Analysis) Done() <-chan struct{} { return j.done }

func (u *Understander) run(body []byte, sha string, j *Analysis) {
	select {
	case u.running <- struct{}{}:
	case <-j.ctx.Done():
		u.settle(sha, j, nil, u.stopped())
		return
	}
	if j.ctx.Err() != nil {
		<-u.running
		u.settle(sha, j, nil, u.stopped())
		return
	}
	sem, err := u.analyze(j.ctx, body)
	<-u.running
	if j.ctx.Err() != nil {
		u.settle(sha, j, nil, u.stopped())
		return
	}
	var sc *Script
	if err == nil {
		sc, err = fromSemantics(body, sha, sem, u.maxTTL, u.drift)
	}
	if err != nil {
		err = &refusal{msg: analyze.Clip(err.Error(), maxRefusalText)}
	}
	u.settle(sha, j, sc, err)
}

// stopped is the refusal of an analysis stopped before its verdict: at
// shutdown, or because no client waits for it (Leave).
func (u *Understander) stopped() error {
	if u.ctx.Err() != nil {
		return &refusal{msg: "lockproxy is shutting down"}
	}
	return &refusal{msg: "its analysis was stopped: no client waits for it"}
}

// settle records an analysis's outcome and tells its waiters. An analysis
// stopped (shutdown, Leave) records nothing.
func (u *Understander) settle(sha string, j *Analysis, sc *Script, err error) {
	u.mu.Lock()
	j.settled = true
	if u.inflight[sha] == j {
		delete(u.inflight, sha)
	}
	stopped := j.ctx.Err() != nil
	j.cancel() // releases the context's resources
	if !stopped {
		us := &understoodScript{sha: sha, sc: sc, err: err}
		if sc != nil {
			us.bytes = heldBytes(sc)
		} else if err != nil {
			us.bytes = 256 + len(err.Error())
		}
		if old := u.known[sha]; old != nil {
			u.bytes -= old.Value.(*understoodScript).bytes
			u.lru.Remove(old)
		}
		u.known[sha] = u.lru.PushFront(us)
		u.bytes += us.bytes
		for u.lru.Len() > u.keep || (u.bytes > u.maxBytes && u.lru.Len() > 1) {
			old := u.lru.Back()
			ous := old.Value.(*understoodScript)
			delete(u.known, ous.sha)
			u.bytes -= ous.bytes
			u.lru.Remove(old)
		}
	}
	j.sc, j.err = sc, err
	waiters := j.waiters
	j.waiters = nil
	u.mu.Unlock()
	close(j.done)
	for _, f := range waiters {
		f()
	}
}

// Close ends the analyses under way (their waiters hear a refusal).
func (u *Understander) Close() { u.cancel() }
