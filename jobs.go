package main

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/edgerelay/edgerelay/config"
	"github.com/edgerelay/edgerelay/model"
	"github.com/edgerelay/edgerelay/relay"
	"github.com/edgerelay/edgerelay/schedule"
)

// defaultPrune is the prune serve runs when the config declares none.
var defaultPrune = config.JobConfig{Schedule: "@daily", Prune: &config.PruneJob{OlderThan: "30d"}}

// serveJobs are the jobs serve runs: the config's, plus the daily prune
// when the config has no prune job.
func serveJobs(cfg *config.Config, r *relay.Relay) ([]*schedule.Job, error) {
	for _, jc := range cfg.Jobs {
		if jc.Prune != nil {
			return buildJobs(cfg.Jobs, r)
		}
	}
	defs := map[string]config.JobConfig{"default-prune": defaultPrune}
	maps.Copy(defs, cfg.Jobs)
	return buildJobs(defs, r)
}

// buildJobs builds the scheduled jobs of the config (defs, by name) for r.
func buildJobs(defs map[string]config.JobConfig, r *relay.Relay) ([]*schedule.Job, error) {
	var out []*schedule.Job
	for _, name := range slices.Sorted(maps.Keys(defs)) {
		jc := defs[name]
		sched, err := schedule.Parse(jc.Schedule, jc.Timezone)
		if err != nil {
			return nil, fmt.Errorf("job %s: %w", name, err)
		}
		j := &schedule.Job{Name: name, Schedule: sched, Missed: schedule.Missed(jc.Missed)}
		switch {
		case jc.Digest != nil:
			d := jc.Digest
			j.Tenant = d.Tenant
			if j.Run, err = schedule.Digest(r, name, schedule.DigestConfig{Tenant: d.Tenant, Audience: d.Audience, Channel: d.Channel,
				Subject: d.Subject, Template: d.Template, MaxItems: d.MaxItems}); err != nil {
				return nil, err
			}
		case jc.Prune != nil:
			age, err := relay.ParseAge(jc.Prune.OlderThan)
			if err != nil {
				return nil, fmt.Errorf("job %s: %w", name, err)
			}
			j.Run = func(ctx context.Context, _ model.JobRun) (schedule.Outcome, error) {
				res, err := r.Prune(ctx, age)
				return schedule.Outcome{Note: fmt.Sprintf("pruned what finished more than %s ago: %d notifications, %d events, %d feed items",
					res.OlderThan, res.Notifications, res.Events, res.FeedItems)}, err
			}
		case jc.Batch != nil:
			j.Run = batchJob(r, name, jc.Batch.File)
		}
		out = append(out, j)
	}
	return out, nil
}
