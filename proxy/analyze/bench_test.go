package analyze

import (
	"os"
	"testing"
)

// BenchmarkAnalyze measures one analysis of typical scripts, from the body
// to the Semantics: what the proxy pays once per distinct sha1.
func BenchmarkAnalyze(b *testing.B) {
	for _, c := range []struct{ name, file, body string }{
		{name: "release", file: "redis-py_release"},
		{name: "acquire", file: "node-redlock-v3_acquire"},
		{name: "multikey", file: "node-redlock-v5_acquire"},
		{name: "redisson-unlock", file: "redisson-4.x_unlockInner"},
		{name: "symfony-save", body: symfonySave},
	} {
		body := []byte(c.body)
		if c.file != "" {
			var err error
			if body, err = os.ReadFile("testdata/corpus/" + c.file + ".lua"); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Analyze(body, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
