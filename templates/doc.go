// Package templates turns an event's data into the message one recipient
// is sent on one channel, from templates kept per notification type (or
// purpose), channel and locale.
//
// It owns parsing (errors name the file, line and column), locale
// fallback (de-AT, then de, then the default locale), the helpers for
// dates, numbers and currency in the recipient's locale and time zone,
// and strict rendering: a field the data does not have is an error that
// names the template, line and field, never "<no value>". HTML parts are
// html/template: data is escaped for its context.
//
// Every rendering runs under budgets (budget.go: loop iterations, time,
// memory, output), since any tenant's token can store a template.
//
// It must never do I/O while rendering, nor let a clock change what it
// renders (the time budget only stops a rendering): the same template and
// data give the same bytes, which is what lets the relay render once at
// accept and send those bytes on every attempt.
package templates

//go:generate go run gen_locales.go
