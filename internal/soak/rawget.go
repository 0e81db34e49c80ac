package soak

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// The timer's GETs go over a blocking socket, read and written by its one
// goroutine's thread in the kernel: the response's arrival wakes that
// thread and nothing else. Through net/http the arrival woke Go's network
// poller, which woke a thread for the transport's reading goroutine, which
// handed the body to the caller's: each wake-up on this busy two-CPU node
// was one more wait for a CPU, and the timer's threads waited 12.9 ms at
// p99 within its queries in a 10-minute run (1.0 at the median), a wait of
// the measuring client that a responder's, on another machine, does not
// add to the agent's answer.

// blockingClient GETs over one kept-alive blocking connection at a time.
type blockingClient struct {
	fd   int // -1: none open
	addr string
	br   *bufio.Reader
}

func newBlockingClient() *blockingClient { return &blockingClient{fd: -1} }

// fdConn is a blocking socket as a reader and writer.
type fdConn int

func (c fdConn) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(int(c), p)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (c fdConn) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		n, err := syscall.Write(int(c), p[written:])
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return written, err
		}
		written += n
	}
	return written, nil
}

// timerTimeout bounds a query's connect, write and each read, as the
// net/http client's Timeout did: a hung agent fails the query.
const timerTimeout = 10 * time.Second

// dial opens a blocking connection to addr (an IPv4 or IPv6 literal and a
// port: the soak's agent listens on loopback).
func dial(addr string) (int, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil || ta.IP == nil {
		return -1, fmt.Errorf("dialing %s: want an address literal: %v", addr, err)
	}
	var sa syscall.Sockaddr = &syscall.SockaddrInet6{Port: ta.Port, Addr: [16]byte(ta.IP.To16())}
	family := syscall.AF_INET6
	if ip4 := ta.IP.To4(); ip4 != nil {
		sa, family = &syscall.SockaddrInet4{Port: ta.Port, Addr: [4]byte(ip4)}, syscall.AF_INET
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("dialing %s: %w", addr, err)
	}
	tv := syscall.NsecToTimeval(int64(timerTimeout))
	err = errors.Join(
		// Nagle's algorithm would hold a request's last segment for an ACK.
		syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1),
		syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv),
		syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv))
	if err == nil {
		err = syscall.Connect(fd, sa)
		// Interrupted, the connect goes on in the kernel: wait it out.
		for errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EALREADY) {
			err = syscall.Connect(fd, sa)
		}
		if errors.Is(err, syscall.EISCONN) {
			err = nil
		}
	}
	if err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("dialing %s: %w", addr, err)
	}
	return fd, nil
}

func (c *blockingClient) close() {
	if c.fd >= 0 {
		syscall.Close(c.fd)
	}
	c.fd, c.br = -1, nil
}

// get GETs rawURL and reads the body whole, as the net/http client did
// before: first is the time from start to the response's first byte.
// A kept-alive connection the server closed meanwhile is dialed again
// once, as net/http retries an idempotent request, within the time.
func (c *blockingClient) get(rawURL string, start time.Time) (first time.Duration, err error) {
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil || req.URL.Scheme != "http" {
		return 0, fmt.Errorf("GET %s: want an http URL: %v", rawURL, err)
	}
	host := req.URL.Host
	for attempt := 0; ; attempt++ {
		reused := c.fd >= 0 && c.addr == host
		first, err = c.roundTrip(req, host, start)
		// Retried only where nothing came back: a refusal answered in
		// full has its first byte.
		if err == nil || !reused || first != 0 || attempt > 0 {
			return first, err
		}
	}
}

// roundTrip writes req on the connection to host (dialed if none) and
// reads its response whole.
func (c *blockingClient) roundTrip(req *http.Request, host string, start time.Time) (first time.Duration, err error) {
	if c.fd >= 0 && c.addr != host {
		c.close()
	}
	if c.fd < 0 {
		fd, err := dial(host)
		if err != nil {
			return 0, err
		}
		c.fd, c.addr, c.br = fd, host, bufio.NewReader(nil)
	}
	c.br.Reset(&firstRead{r: fdConn(c.fd), start: start, first: &first})
	defer func() {
		if err != nil && !errors.As(err, new(statusError)) {
			c.close()
		}
	}()
	bw := bufio.NewWriter(fdConn(c.fd))
	if err := req.Write(bw); err != nil {
		return 0, fmt.Errorf("GET %s: %w", req.URL, err)
	}
	if err := bw.Flush(); err != nil {
		return 0, fmt.Errorf("GET %s: %w", req.URL, err)
	}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		return first, fmt.Errorf("GET %s: %w", req.URL, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return first, fmt.Errorf("GET %s: %w", req.URL, err)
	}
	if resp.Close {
		c.close()
	}
	if resp.StatusCode != http.StatusOK {
		// Read whole, the connection stays: only a failed exchange closes it.
		return first, statusError{fmt.Errorf("GET %s: %s: %.200s", req.URL, resp.Status, body)}
	}
	return first, nil
}

// statusError is a refusal the server answered in full.
type statusError struct{ error }

// firstRead notes when its first read returned bytes.
type firstRead struct {
	r     io.Reader
	start time.Time
	first *time.Duration
}

func (f *firstRead) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n > 0 && *f.first == 0 {
		*f.first = time.Since(f.start)
	}
	return n, err
}
