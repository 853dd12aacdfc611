package proxy_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkAcquireRelease measures the whole hot path: go-redis clients →
// lockproxy → 5 real masters, SET NX PX then the release script, from
// parallel goroutines (so batching across connections is exercised).
// Compare runs with benchstat; allocs/op counts the test process, lockproxy
// included.
func BenchmarkAcquireRelease(b *testing.B) {
	c := startCluster(b, 5)
	cl := c.client(func(o *redis.Options) { o.PoolSize = 64 })
	rel := redis.NewScript(releaseScript)
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			key := "bench:" + strconv.FormatInt(i, 10)
			ok, err := cl.SetNX(ctx, key, "tok", 10*time.Second).Result()
			if err != nil || !ok {
				b.Errorf("acquire: %v %v", ok, err)
				return
			}
			if err := rel.Run(ctx, cl, []string{key}, "tok").Err(); err != nil {
				b.Errorf("release: %v", err)
				return
			}
		}
	})
}

// BenchmarkPipelinedSetNX: one connection sending pipelines of 16 SET NX,
// as redis-benchmark -P 16 does.
func BenchmarkPipelinedSetNX(b *testing.B) {
	c := startCluster(b, 5)
	cl := c.client()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 16 {
		p := cl.Pipeline()
		for j := 0; j < 16; j++ {
			p.SetNX(ctx, "pbench:"+strconv.Itoa(i+j), "tok", 10*time.Second)
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
