// Package egress is the inference-only network of a sandbox: an HTTP proxy
// on the host side of each launch (CONNECT for TLS, forwarding for plain
// http) that allows only the provider's inference endpoints, reached from
// inside through a Unix socket bound into the sandbox and a bridge on the
// sandbox's own loopback. The sandbox keeps its network namespace: nothing
// else has a route out, and nothing inside can resolve a name.
//
// The proxy and the bridge are nlx re-executed in helper modes (Main);
// Start runs the proxy for one launch.
package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Endpoint is one allowed host:port.
type Endpoint struct {
	Host string
	Port int
	// Literal is set when Host is an IP address: the proxy then connects to
	// it whatever its range.
	Literal netip.Addr
}

func (e Endpoint) String() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// ParseEndpoint reads a host:port entry of a provider's inference list.
func ParseEndpoint(s string) (Endpoint, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return Endpoint{}, fmt.Errorf("inference endpoint %q: %w", s, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return Endpoint{}, fmt.Errorf("inference endpoint %q: port %q is not 1-65535", s, port)
	}
	if host == "" || strings.ContainsAny(host, "*/") {
		return Endpoint{}, fmt.Errorf("inference endpoint %q: a host, not a wildcard or a range", s)
	}
	e := Endpoint{Host: strings.ToLower(host), Port: p}
	if a, err := netip.ParseAddr(host); err == nil {
		e.Literal = a.Unmap()
		e.Host = e.Literal.String()
	}
	return e, nil
}

// Policy is what one launch's proxy allows.
type Policy struct {
	Allow []Endpoint
}

// NewPolicy parses the entries; a bad one is an error.
func NewPolicy(entries []string) (*Policy, error) {
	p := &Policy{}
	for _, s := range entries {
		e, err := ParseEndpoint(s)
		if err != nil {
			return nil, err
		}
		p.Allow = append(p.Allow, e)
	}
	return p, nil
}

// Match returns the entry naming host:port, if any.
func (p *Policy) Match(host string, port int) (Endpoint, bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		host = a.Unmap().String()
	}
	for _, e := range p.Allow {
		if e.Host == host && e.Port == port {
			return e, true
		}
	}
	return Endpoint{}, false
}

// Internal reports whether a is an address the proxy never connects to by
// a name: loopback, link-local, private, shared (CGNAT), unspecified or
// multicast. Only an entry naming it as a literal IP reaches it.
func Internal(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsPrivate() ||
		a.IsUnspecified() || a.IsMulticast() || a.IsInterfaceLocalMulticast() || cgnat.Contains(a)
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")
