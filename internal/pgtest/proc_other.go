//go:build !linux

package pgtest

import "syscall"

// sysProcAttr runs the server as cred. Without Linux's parent-death signal,
// a killed test process leaves its server running until Stop or a reboot.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}

func bouncerProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
