// Package fdpass hands open descriptors from one of nlx's processes to
// another over a Unix socket (SCM_RIGHTS), with one byte that says what
// they are: nlx's bridges inside a sandbox give the host side the
// provider's stdio (the tool bridge) or each connection they accept (the
// egress bridge), and step off the data path.
package fdpass

import (
	"net"
	"syscall"
)

// Send writes b over c with fds.
func Send(c *net.UnixConn, b byte, fds ...int) error {
	_, _, err := c.WriteMsgUnix([]byte{b}, syscall.UnixRights(fds...), nil)
	return err
}

// maxFDs is how many descriptors Receive makes room for; any beyond are
// discarded by the kernel (a sender of nlx's sends one or two).
const maxFDs = 4

// Receive reads the first byte c sends and the descriptors that came
// with it. first is empty when c ended before sending anything. The
// caller owns fds: it closes those it does not keep (Close).
func Receive(c *net.UnixConn) (first []byte, fds []int, err error) {
	buf := make([]byte, 1)
	oob := make([]byte, syscall.CmsgSpace(maxFDs*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range msgs {
			if rights, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
				fds = append(fds, rights...)
			}
		}
	}
	return buf[:n], fds, nil
}

// Close closes each of fds.
func Close(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}
