package pgtest

import "syscall"

// sysProcAttr runs the server as cred (nil: as this process's user) and
// has the kernel send it SIGQUIT (immediate shutdown) when the thread that
// started it exits.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
}

// bouncerProcAttr runs PgBouncer as cred and has the kernel send it SIGTERM
// (immediate shutdown) when the thread that started it exits.
func bouncerProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGTERM}
}
