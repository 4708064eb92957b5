// Package schedule runs jobs on cron schedules: a digest of each member's
// unread feed items, a prune, a batch file (the job's work is a function
// given by its caller). It owns the schedule (robfig/cron expressions, and
// "@every D" anchored to the Unix epoch), finding the latest run that was
// due (Schedule.Prev), and a run's identity: the job and the time it was
// scheduled for.
//
// It accepts events only through the relay (relay.AcceptAll) and keeps its
// runs through the relay (BeginJobRun, FinishJobRun, LastJobRun): it never
// holds a store, never writes SQL, and never delivers (the dispatcher does,
// in serve or dispatch). A run must derive every event it sends from its
// identity, so that repeating it (a restart, a second instance, a person
// running it again) sends nothing twice.
package schedule
