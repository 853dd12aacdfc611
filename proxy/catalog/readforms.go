package catalog

import "github.com/lockproxy/lockproxy/quorum"

// Reads the engine answers itself. A script that only reads a lock's value
// and PTTL together ({GET KEYS[1], PTTL KEYS[1]}: redlock-rb's
// get_remaining_ttl, which backs locked? and valid_lock?) is no lock
// operation of its own: each master's pair says who holds the key there and
// for how long, which is what lockproxy's GET and PTTL already combine by
// quorum. The engine runs its own [value, pttl] read instead of the
// client's script (quorum.Engine.ValuePTTL), so the masters never load it.
//
// These forms are matched by normal form (Normalize), after the catalog's
// scripts, and are not in Scripts(): the catalog's scripts are the
// libraries' own bodies and what the masters load.
var readForms = []struct {
	body string
	s    Script
}{
	{`return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}`,
		Script{Name: "value and PTTL read", Kind: quorum.Read, ValuePTTL: true, MinKeys: 1}},
}

// addReadForms indexes readForms by normal form.
func (c *Catalog) addReadForms() {
	c.reads = map[string]*Script{}
	for _, f := range readForms {
		s := f.s
		s.Body, s.SHA1 = f.body, sha1Hex([]byte(f.body))
		s.finish()
		norm, err := appendNormal(nil, []byte(f.body))
		if err != nil || len(norm) == 0 {
			panic("catalog: read form " + s.Name + " does not normalize")
		}
		c.reads[string(norm)] = &s
	}
}
