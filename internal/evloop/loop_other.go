//go:build !linux

package evloop

import (
	"log/slog"
	"syscall"
)

// Supported reports whether this platform has the event loop.
const Supported = false

const (
	Readable = 1
	Writable = 4
	Hangup   = 16
	Error    = 8
)

// Loop is not available on this platform: New fails with ErrUnsupported
// and callers use a goroutine per connection.
type Loop struct{ shared }

type Alarm struct{}

func (a *Alarm) At(at int64) {}

func New(log *slog.Logger) (*Loop, error)                  { return nil, ErrUnsupported }
func (l *Loop) Add(fd int, h Handler, events uint32) error { return ErrUnsupported }
func (l *Loop) Modify(fd int, events uint32) error         { return ErrUnsupported }
func (l *Loop) Remove(fd int)                              {}
func (l *Loop) NewAlarm(t Timer) *Alarm                    { return &Alarm{} }
func (l *Loop) Close()                                     {}
func (l *Loop) wake()                                      {}
func (l *Loop) survive()                                   {}
func Read(fd int, p []byte) (int, error)                   { return 0, ErrUnsupported }
func Write(fd int, p []byte) (int, error)                  { return 0, ErrUnsupported }
func Detach(conn interface {
	SyscallConn() (syscall.RawConn, error)
	Close() error
}) (int, error) {
	return -1, ErrUnsupported
}
