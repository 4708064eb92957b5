package mysqltest

import "syscall"

// sysProcAttr runs the server as cred (nil: as this process's user) and
// has the kernel kill it when the thread that started it exits: a
// throwaway server needs no clean shutdown.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}
