package testserver

import "syscall"

// procAttr runs the process as cred and has the kernel send it death when
// the thread that started it exits.
func procAttr(cred *syscall.Credential, death syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: death}
}
