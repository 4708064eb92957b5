//go:build !linux

package testserver

import "syscall"

// procAttr runs the process as cred. Without Linux's parent-death signal,
// a killed test process leaves its server running until Stop or a reboot.
func procAttr(cred *syscall.Credential, _ syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
