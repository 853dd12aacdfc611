package proxy

// SharedPushBytes is what the front counts of the pub/sub payloads its
// subscribers hold (sharedpush.go: taken, framed and not written, held by
// a TLS writer), read on its loop; for the tests of package proxy_test.
func (s *Server) SharedPushBytes() int64 {
	s.mu.Lock()
	f := s.front
	s.mu.Unlock()
	if f == nil {
		return 0
	}
	got := make(chan int64, 1)
	if f.loop.Post(func() { got <- f.shared.bytes }) != nil {
		return 0
	}
	return <-got
}
