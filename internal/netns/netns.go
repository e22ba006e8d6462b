// Package netns runs code where multicast cannot leave the host: inside a
// fresh Linux network namespace that holds nothing but a loopback interface.
// The demo and the real-socket tests re-execute themselves there (as root,
// or as any user where unprivileged user namespaces are allowed); the
// namespace disappears with the process.
package netns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// EnvMarker is set in the environment of a process started by Command, so
// that it knows it runs inside the private namespace.
const EnvMarker = "MCNODE_PRIVATE_NETNS"

// Inside reports whether this process was started by Command.
func Inside() bool { return os.Getenv(EnvMarker) != "" }

// Command returns a command that runs in a new, empty network namespace: as
// root a plain one; otherwise inside a new user namespace in which this user
// is root. The marker value tells the child what it is for.
func Command(marker, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), EnvMarker+"="+marker)
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	cmd.SysProcAttr = attr
	return cmd
}

// Unavailable reports whether err means namespaces cannot be created here
// (not root, and unprivileged user namespaces are off).
func Unavailable(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EACCES)
}

// Prepare checks that this process is in a private namespace that holds only
// a loopback interface, and brings that interface up. Multicast sent or
// joined here cannot reach any real network.
func Prepare() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagLoopback == 0 {
			return fmt.Errorf("netns: interface %s exists here: this is not a private network namespace, refusing to use multicast", ifi.Name)
		}
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns: socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("netns: flags of lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_MULTICAST)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("netns: bringing lo up: %w", err)
	}
	return nil
}
