package analyze

import (
	"fmt"
	"reflect"
	"sort"
)

// reportEffects lists what the script does besides the lock: publications,
// list pushes, counters, other keys, command names taken from arguments.
func (a *analysis) reportEffects(sem *Semantics, f *finding, v *verdict) {
	yesOf := map[*obs]bool{}
	for _, j := range v.judged {
		yesOf[j.o] = j.yes
	}
	aux, written := map[Arg]bool{}, map[Arg]bool{}
	cmdArgs := map[Arg]bool{}
	for _, o := range append(a.judgedObs(v), a.others(v)...) {
		yes, judged := yesOf[o]
		if !judged {
			yes = o.o.err == "" && sem.Yes.Match(&o.o.reply, a.nkeys)
		}
		sem.ReadsClock = sem.ReadsClock || o.o.r.clockRead
		for _, c := range o.o.r.calls {
			switch {
			case c.name == "publish" || c.name == "spublish":
				p := Publish{Command: c.name, Channel: a.templateOf(c.args[1]), Message: a.templateOf(c.args[2])}
				if c.from >= 0 {
					p.Command, p.CommandArg = "", argOf(c.from, a.nkeys)
					cmdArgs[p.CommandArg] = true
				}
				sem.Publishes = addPublish(sem.Publishes, p, yes)
			case c.name == "lpush" || c.name == "rpush":
				for _, val := range c.args[2:] {
					p := Push{Command: c.name, Key: argOf(o.o.r.pos(c.args[1]), a.nkeys), Value: a.valueOf(val)}
					if !containsPush(sem.Pushes, p) {
						sem.Pushes = append(sem.Pushes, p)
					}
				}
			}
			if spec, ok := commands[c.name]; ok && spec.keys != nil && c.from < 0 {
				for _, i := range spec.keys(c.args) {
					if p := o.o.r.pos(c.args[i]); p >= 0 && !contains(f.keys, p) {
						aux[argOf(p, a.nkeys)] = true
						if !readOnly[c.name] {
							written[argOf(p, a.nkeys)] = true
						}
					}
				}
			}
		}
	}
	sem.Counters = a.counters(v)
	for k := range aux {
		sem.AuxKeys = append(sem.AuxKeys, k)
	}
	for k := range written {
		sem.WrittenKeys = append(sem.WrittenKeys, k)
	}
	for k := range cmdArgs {
		sem.CommandArgs = append(sem.CommandArgs, k)
	}
	sortArgs(sem.AuxKeys)
	sortArgs(sem.WrittenKeys)
	sortArgs(sem.CommandArgs)
}

func addPublish(ps []Publish, p Publish, yes bool) []Publish {
	for i := range ps {
		q := ps[i]
		q.OnYes, q.OnNo = false, false
		if q == p {
			ps[i].OnYes = ps[i].OnYes || yes
			ps[i].OnNo = ps[i].OnNo || !yes
			return ps
		}
	}
	p.OnYes, p.OnNo = yes, !yes
	return append(ps, p)
}

func containsPush(ps []Push, p Push) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

func sortArgs(as []Arg) {
	sort.Slice(as, func(i, j int) bool {
		if as[i].Keys != as[j].Keys {
			return as[i].Keys
		}
		return as[i].Index < as[j].Index
	})
}

// semDiff names the first field in which two analyses differ.
func semDiff(x, y *Semantics) string {
	vx, vy := reflect.ValueOf(*x), reflect.ValueOf(*y)
	for i := 0; i < vx.NumField(); i++ {
		if !reflect.DeepEqual(vx.Field(i).Interface(), vy.Field(i).Interface()) {
			return fmt.Sprintf("%s: %v, then %v", vx.Type().Field(i).Name, vx.Field(i).Interface(), vy.Field(i).Interface())
		}
	}
	return "no difference"
}
