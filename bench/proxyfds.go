package bench

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
)

// readProxyFds returns pid's descriptors, those among them connected to a
// master, and how many of its sockets are connected to anything else (a
// client).
func readProxyFds(pid int, masters []string) (proxyFds, int, error) {
	var fds proxyFds
	masterPorts := map[int]bool{}
	for _, m := range masters {
		_, port, err := net.SplitHostPort(m)
		if err != nil {
			return fds, 0, err
		}
		p, _ := strconv.Atoi(port)
		masterPorts[p] = true
	}
	socks, err := tcpSockets()
	if err != nil {
		return fds, 0, err
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fds, 0, err
	}
	clients := 0
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds.all = append(fds.all, fd)
		link, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		inode, ok := strings.CutPrefix(link, "socket:[")
		if !ok {
			continue
		}
		s, ok := socks[strings.TrimSuffix(inode, "]")]
		switch {
		case !ok || s.listening:
		case masterPorts[s.remotePort]:
			fds.master = append(fds.master, fd)
		default:
			clients++
		}
	}
	return fds, clients, nil
}

// tcpSocket is what readProxyFds needs of a line of /proc/net/tcp.
type tcpSocket struct {
	remotePort int
	listening  bool
}

// tcpSockets reads /proc/net/tcp and tcp6, by inode.
func tcpSockets() (map[string]tcpSocket, error) {
	socks := map[string]tcpSocket{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) && f != "/proc/net/tcp" {
			continue // no IPv6
		}
		if err != nil {
			return nil, err
		}
		parseNetTCP(string(b), socks)
	}
	return socks, nil
}

// parseNetTCP adds the sockets of a /proc/net/tcp file to socks:
//
//	sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
//	 0: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 ...
func parseNetTCP(s string, socks map[string]tcpSocket) {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		_, rport, ok := strings.Cut(f[2], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseInt(rport, 16, 32)
		if err != nil {
			continue
		}
		socks[f[9]] = tcpSocket{remotePort: int(port), listening: f[3] == "0A"}
	}
}
