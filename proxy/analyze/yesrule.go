package analyze

import (
	"fmt"
	"strings"
)

// inferYes finds the simplest rule that accepts every yes reply and rejects
// every no reply. data says the yes integers carry data (a PTTL, a counter)
// rather than a fixed verdict, so a single observed value is no rule;
// strData says the same of yes strings (they carry an argument's value).
func inferYes(yes, no []Reply, data, strData bool) (YesRule, error) {
	if len(yes) == 0 {
		return YesRule{}, &Refusal{Class: ClassBehaviour, Reason: "no probe answered yes"}
	}
	t, orBulk := yes[0].Type, false
	for _, r := range yes {
		switch {
		case r.Type == t:
		case (r.Type == StatusReply && t == BulkReply) || (r.Type == BulkReply && t == StatusReply):
			t, orBulk = StatusReply, true
		default:
			return YesRule{}, noRule(yes, no, "yes replies of several types")
		}
	}
	var cands []YesRule
	switch t {
	case NilReply:
		cands = []YesRule{{Type: NilReply}}
	case StatusReply, BulkReply:
		cands = []YesRule{{Type: t, Str: yes[0].Str, OrBulk: orBulk}, {Type: t, AnyStr: true, OrBulk: orBulk}}
		if strData {
			// The probe's text would match no real call's reply.
			cands = cands[1:]
		}
	case IntReply:
		if !data {
			cands = append(cands, YesRule{Type: t, Cmp: IntEq, Int: yes[0].Int})
		}
		cands = append(cands, YesRule{Type: t, Cmp: IntNonNegative}, YesRule{Type: t, Cmp: IntPositive}, YesRule{Type: t, Cmp: IntAny})
	case ArrayReply:
		var firsts, noFirsts []Reply
		for _, r := range yes {
			if len(r.Elems) == 0 {
				return YesRule{}, noRule(yes, no, "an empty array among the yes replies")
			}
			firsts = append(firsts, r.Elems[0])
		}
		for _, r := range no {
			if r.Type == ArrayReply && len(r.Elems) > 0 {
				noFirsts = append(noFirsts, r.Elems[0])
			}
		}
		first, err := inferYes(firsts, noFirsts, data, strData)
		if err != nil {
			return YesRule{}, noRule(yes, no, "no rule on the first element")
		}
		cands = []YesRule{{Type: ArrayReply, First: &first}}
	default:
		return YesRule{}, noRule(yes, no, "a yes reply is an error")
	}
	for _, c := range cands {
		if accepts(&c, yes, true) && accepts(&c, no, false) {
			return c, nil
		}
	}
	return YesRule{}, noRule(yes, no, "")
}

// accepts reports whether rule y says want to every reply. numKeys does not
// matter here: an exact integer stands for #KEYS until the layouts are
// combined.
func accepts(y *YesRule, rs []Reply, want bool) bool {
	for i := range rs {
		if y.Match(&rs[i], 0) != want {
			return false
		}
	}
	return true
}

func noRule(yes, no []Reply, why string) *Refusal {
	s := fmt.Sprintf("no reply rule tells the yes replies %s from the no replies %s", replySet(yes), replySet(no))
	if why != "" {
		s += " (" + why + ")"
	}
	return &Refusal{Class: ClassBehaviour, Reason: s}
}

// replySet renders distinct replies, in order of appearance.
func replySet(rs []Reply) string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rs {
		if s := r.String(); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return "{" + strings.Join(out, ", ") + "}"
}

// noReplyOf makes the client's reply after a lost vote from the script's
// own reply in a state that answered no. An integer equal to the holder's
// PTTL (Redisson answers a taken lock with it) is marked as such.
func noReplyOf(r Reply, pttl int64) NoReply {
	n := NoReply{Reply: r, PTTLAt: -1}
	switch {
	case r.Type == IntReply && r.Int == pttl:
		n.PTTLAt, n.Reply.Int = 0, 0
	case r.Type == ArrayReply:
		n.Reply.Elems = append([]Reply(nil), r.Elems...)
		for i, e := range r.Elems {
			if e.Type == IntReply && e.Int == pttl {
				n.PTTLAt, n.Reply.Elems[i].Int = i+1, 0
				break
			}
		}
	}
	return n
}

// setPTTL sets the placeholder of the holder's PTTL in n's reply.
func (n *NoReply) setPTTL(v int64) {
	switch {
	case n.PTTLAt == 0:
		n.Reply.Int = v
	case n.PTTLAt > 0:
		n.Reply.Elems[n.PTTLAt-1].Int = v
	}
}
