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
