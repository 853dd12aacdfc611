package batching

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// ServerVersion is what a master said of itself in INFO server, read when
// its connection is set up (Options.CheckVersion).
type ServerVersion struct {
	// Server is "redis", or the server_name a fork gives ("valkey").
	Server string
	// Version is the server's own version: valkey_version for Valkey,
	// redis_version otherwise.
	Version string
	// Redis is redis_version: the Redis release whose commands and
	// scripting the server offers. Valkey 8 reports 7.2.4 there.
	Redis string
	// Major, Minor and Patch are Redis's, parsed; what a minimum version
	// is compared with, since the features lockproxy needs are named by
	// the Redis release that brought them.
	Major, Minor, Patch int
}

// String is "redis 7.0.15", or "valkey 8.0.1 (redis_version 7.2.4)".
func (v ServerVersion) String() string {
	if v.Server == "" {
		return ""
	}
	if v.Server == "redis" || v.Version == v.Redis {
		return v.Server + " " + v.Version
	}
	return fmt.Sprintf("%s %s (redis_version %s)", v.Server, v.Version, v.Redis)
}

// AtLeast reports whether the server offers what Redis major.minor does.
func (v ServerVersion) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// ParseServerInfo reads the version fields of INFO server's text.
func ParseServerInfo(info string) (ServerVersion, error) {
	f := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && !strings.HasPrefix(k, "#") {
			f[k] = val
		}
	}
	v := ServerVersion{Server: "redis", Redis: f["redis_version"]}
	if v.Redis == "" {
		return v, fmt.Errorf("INFO server has no redis_version field")
	}
	v.Version = v.Redis
	if name := f["server_name"]; name != "" {
		v.Server = name
	}
	if vv := f["valkey_version"]; vv != "" {
		v.Version = vv
		if f["server_name"] == "" {
			v.Server = "valkey"
		}
	}
	// Each number is read up to its first non-digit: a build may carry a
	// suffix ("7.4.0-rc1"), which must not refuse it.
	parts := strings.SplitN(v.Redis, ".", 3)
	nums := []*int{&v.Major, &v.Minor, &v.Patch}
	for i, p := range parts {
		end := 0
		for end < len(p) && end < 9 && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		if end == 0 && i < 2 {
			return v, fmt.Errorf("INFO server: redis_version %q is not major.minor.patch", v.Redis)
		}
		*nums[i], _ = strconv.Atoi(p[:end])
	}
	if len(parts) < 2 {
		return v, fmt.Errorf("INFO server: redis_version %q is not major.minor.patch", v.Redis)
	}
	return v, nil
}
