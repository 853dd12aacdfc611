package analyze

import "testing"

// TestTokenField: a JSON object lock reports the field that holds the
// token, for every kind (the masters check the token there alone: a
// constant field's value, which every holder's copy carries, passed for
// every holder's token).
func TestTokenField(t *testing.T) {
	for _, c := range []struct{ name, body, field string }{
		{"acquire", `if redis.call("SET", KEYS[1], cjson.encode({owner = ARGV[1], kind = "mutex"}), "NX", "PX", ARGV[2]) then return 1 end
return 0`, "owner"},
		{"extend", `local v = redis.call("GET", KEYS[1])
if v and cjson.decode(v).owner == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return 1
end
return 0`, "owner"},
		{"plain value", `if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return 1 end
return 0`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sem, err := Analyze([]byte(c.body), Options{})
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if sem.TokenField != c.field {
				t.Errorf("TokenField %q, want %q (%s)", sem.TokenField, c.field, sem)
			}
		})
	}
}
