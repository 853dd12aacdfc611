package analyze

// cmdSpec is one command of the model.
type cmdSpec struct {
	arity int                  // as Redis declares it: n exactly, -n at least n, the name included
	keys  func([]string) []int // indexes of the arguments that are keys; nil for none
	fn    func(*run, []string) Reply
}

func firstKey([]string) []int { return []int{1} }

func allKeys(args []string) []int {
	out := make([]int, len(args)-1)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func pairKeys(args []string) []int {
	var out []int
	for i := 1; i < len(args); i += 2 {
		out = append(out, i)
	}
	return out
}

// commands is the model: the commands lock scripts use, with Redis 7.0's
// replies and error texts. Anything else is refused by name.
// readOnly are the commands of commands that write no key.
var readOnly = map[string]bool{
	"get": true, "mget": true, "getrange": true, "strlen": true, "exists": true,
	"ttl": true, "pttl": true, "type": true, "hget": true, "hmget": true,
	"hexists": true, "hlen": true, "hgetall": true, "hkeys": true, "hvals": true,
	"zscore": true, "zcard": true, "zcount": true, "zrange": true, "zrevrange": true,
	"llen": true, "time": true, "select": true, "publish": true, "spublish": true,
}

var commands = map[string]cmdSpec{
	"get":              {2, firstKey, (*run).get},
	"set":              {-3, firstKey, (*run).set},
	"setnx":            {3, firstKey, (*run).setnx},
	"setex":            {4, firstKey, (*run).setex},
	"psetex":           {4, firstKey, (*run).setex},
	"mset":             {-3, pairKeys, (*run).mset},
	"msetnx":           {-3, pairKeys, (*run).mset},
	"mget":             {-2, allKeys, (*run).mget},
	"getrange":         {4, firstKey, (*run).getrange},
	"strlen":           {2, firstKey, (*run).strlen},
	"incr":             {2, firstKey, (*run).incr},
	"decr":             {2, firstKey, (*run).incr},
	"incrby":           {3, firstKey, (*run).incr},
	"decrby":           {3, firstKey, (*run).incr},
	"del":              {-2, allKeys, (*run).del},
	"unlink":           {-2, allKeys, (*run).del},
	"exists":           {-2, allKeys, (*run).exists},
	"expire":           {-3, firstKey, (*run).expire},
	"pexpire":          {-3, firstKey, (*run).expire},
	"expireat":         {-3, firstKey, (*run).expire},
	"pexpireat":        {-3, firstKey, (*run).expire},
	"persist":          {2, firstKey, (*run).persist},
	"ttl":              {2, firstKey, (*run).ttl},
	"pttl":             {2, firstKey, (*run).ttl},
	"type":             {2, firstKey, (*run).typeOf},
	"hget":             {3, firstKey, (*run).hget},
	"hmget":            {-3, firstKey, (*run).hmget},
	"hset":             {-4, firstKey, (*run).hset},
	"hmset":            {-4, firstKey, (*run).hset},
	"hsetnx":           {4, firstKey, (*run).hset},
	"hdel":             {-3, firstKey, (*run).hdel},
	"hexists":          {3, firstKey, (*run).hexists},
	"hincrby":          {4, firstKey, (*run).hincrby},
	"hlen":             {2, firstKey, (*run).hlen},
	"hgetall":          {2, firstKey, (*run).hgetall},
	"hkeys":            {2, firstKey, (*run).hgetall},
	"hvals":            {2, firstKey, (*run).hgetall},
	"zadd":             {-4, firstKey, (*run).zadd},
	"zscore":           {3, firstKey, (*run).zscore},
	"zrem":             {-3, firstKey, (*run).zrem},
	"zcard":            {2, firstKey, (*run).zcard},
	"zcount":           {4, firstKey, (*run).zcount},
	"zremrangebyscore": {4, firstKey, (*run).zcount},
	"zrange":           {-4, firstKey, (*run).zrange},
	"zrevrange":        {-4, firstKey, (*run).zrange},
	"lpush":            {-3, firstKey, (*run).push},
	"rpush":            {-3, firstKey, (*run).push},
	"llen":             {2, firstKey, (*run).llen},
	"publish":          {3, nil, (*run).publish},
	"spublish":         {3, nil, (*run).publish},
	"time":             {1, nil, (*run).time},
	"select":           {2, nil, (*run).selectDB},
}
