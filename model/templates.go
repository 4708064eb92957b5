package model

import "time"

// TemplateKey names a stored template: one tenant's template of one name
// (a notification type or purpose), channel and locale.
type TemplateKey struct {
	Tenant  string `json:"tenant"`
	Name    string `json:"name"`
	Channel string `json:"channel"`
	Locale  string `json:"locale"`
}

// StoredTemplate is one version of a stored template.
type StoredTemplate struct {
	TemplateKey
	Version   int               `json:"version"`
	Parts     map[string]string `json:"parts"`
	CreatedAt time.Time         `json:"created_at"`
	// RetiredAt is set on a latest version that was deleted.
	RetiredAt *time.Time `json:"retired_at,omitempty"`
}

// StoredWorkflow is one version of a tenant's workflow for one event type
// (package workflow says what a definition is). Versions are numbered
// from 1; a run keeps the version it started with.
type StoredWorkflow struct {
	Tenant string `json:"tenant"`
	Type   string `json:"type"`
	// Version numbers the type's versions from 1.
	Version int `json:"version"`
	// Definition is the workflow as saved: JSON, checked before it was
	// stored.
	Definition []byte    `json:"-"`
	CreatedAt  time.Time `json:"created_at"`
	// RetiredAt is set on a latest version that was deleted: new events of
	// the type are delivered as without a workflow.
	RetiredAt *time.Time `json:"retired_at,omitempty"`
}
