package templates

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // IANA zones in the static binary, whatever the host has

	"github.com/bojanz/currency"
	"github.com/go-playground/locales"
)

// placeholderFuncs has every helper's name, for parsing; each rendering
// binds its own (the recipient's locale and zone).
var placeholderFuncs = helpers("en", time.UTC, &budget{noLimits: true}, nil)

// helpers are the functions a template may call, bound to one rendering's
// locale and time zone:
//
//	date V [short|medium|long|full]      a date (default medium)
//	time V [short|medium|long|full]      a time of day (default short)
//	datetime V [style]                   both
//	number V [DECIMALS]                  a number, grouped in the locale
//	currency AMOUNT CODE                 an amount, exact (a decimal string or number)
//	get MAP KEY [DEFAULT]                an optional field: DEFAULT (or "") when absent
//	json V                               V as JSON (for push data and webhook bodies)
//	track URL                            URL as a link whose clicks are counted for this
//	                                     message (an http or https URL; as written when
//	                                     the relay has no public URL, and in previews)
//
// V for dates is RFC 3339 text or Unix seconds.
func helpers(locale string, loc *time.Location, b *budget, track func(string) (string, error)) map[string]any {
	tr := translator(locale)
	check := b.check
	dt := func(kind string) func(v any, style ...string) (string, error) {
		return func(v any, style ...string) (string, error) {
			if err := check(); err != nil {
				return "", err
			}
			t, err := toTime(v)
			if err != nil {
				return "", err
			}
			t = t.In(loc)
			s := "medium"
			if kind == "time" {
				s = "short"
			}
			if len(style) > 0 {
				s = style[0]
			}
			d, tm, err := formats(tr, s)
			if err != nil {
				return "", err
			}
			switch kind {
			case "date":
				return d(t), nil
			case "time":
				return tm(t), nil
			}
			return d(t) + " " + tm(t), nil
		}
	}
	fm := map[string]any{
		"date":     dt("date"),
		"time":     dt("time"),
		"datetime": dt("datetime"),
		"number": func(v any, decimals ...int) (string, error) {
			if err := check(); err != nil {
				return "", err
			}
			s, err := numberText(v)
			if err != nil {
				return "", err
			}
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return "", fmt.Errorf("number: %q is not a finite number", s)
			}
			d := 0
			if i := strings.IndexByte(s, '.'); i >= 0 && !strings.ContainsAny(s, "eE") {
				d = len(s) - i - 1
			}
			if len(decimals) > 0 {
				d = decimals[0]
			}
			if d < 0 || d > 12 {
				return "", fmt.Errorf("number: %d decimals (0 to 12)", d)
			}
			return tr.FmtNumber(f, uint64(d)), nil
		},
		"currency": func(v any, code string) (string, error) {
			if err := check(); err != nil {
				return "", err
			}
			s, err := numberText(v)
			if err != nil {
				return "", err
			}
			// The formatter writes NaN for an amount in exponent form
			// (1e15), for Inf and NaN: only plain decimals are money.
			if !plainDecimal.MatchString(s) {
				return "", fmt.Errorf("currency: %q is not an amount: write it as a plain decimal (1234.56), without an exponent", s)
			}
			a, err := currency.NewAmount(s, code)
			if err != nil {
				return "", fmt.Errorf("currency: %v", err)
			}
			return currency.NewFormatter(currency.NewLocale(locale)).Format(a), nil
		},
		"get": func(m map[string]any, key string, def ...any) (any, error) {
			if err := check(); err != nil {
				return nil, err
			}
			if v, ok := m[key]; ok {
				return v, nil
			}
			if len(def) > 0 {
				return def[0], nil
			}
			return "", nil
		},
		"json": func(v any) (string, error) {
			if err := check(); err != nil {
				return "", err
			}
			out, err := json.Marshal(v)
			if err == nil {
				err = b.charge(len(out))
			}
			return string(out), err
		},
		"track": func(link string) (string, error) {
			if err := check(); err != nil {
				return "", err
			}
			if u, err := url.Parse(link); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return "", fmt.Errorf("track: %q is not an http or https URL", link)
			}
			if track == nil {
				return link, nil
			}
			out, err := track(link)
			if err == nil {
				err = b.charge(len(out))
			}
			return out, err
		},
	}
	for k, f := range b.funcs() {
		fm[k] = f
	}
	return fm
}

var plainDecimal = regexp.MustCompile(`^[+-]?[0-9]+(\.[0-9]+)?$`)

func numberText(v any) (string, error) {
	switch x := v.(type) {
	case json.Number:
		return x.String(), nil
	case string:
		return strings.TrimSpace(x), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("%v (%T) is not a number", v, v)
}

func toTime(v any) (time.Time, error) {
	switch x := v.(type) {
	case time.Time:
		return x, nil
	case json.Number:
		n, err := x.Int64()
		if err != nil {
			return time.Time{}, fmt.Errorf("date: %s is not whole Unix seconds", x)
		}
		return time.Unix(n, 0), nil
	case string:
		t, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return time.Time{}, fmt.Errorf("date: %q is not RFC 3339 (2026-03-01T12:00:00Z)", x)
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("date: %v (%T) is not a date", v, v)
}

func formats(tr locales.Translator, style string) (func(time.Time) string, func(time.Time) string, error) {
	switch style {
	case "short":
		return tr.FmtDateShort, tr.FmtTimeShort, nil
	case "medium":
		return tr.FmtDateMedium, tr.FmtTimeMedium, nil
	case "long":
		return tr.FmtDateLong, tr.FmtTimeLong, nil
	case "full":
		return tr.FmtDateFull, tr.FmtTimeFull, nil
	}
	return nil, nil, fmt.Errorf("style %q: use short, medium, long or full", style)
}

var translators sync.Map // CLDR name → locales.Translator

// translator returns the CLDR formats of locale or its nearest parent
// (de-AT, de), else English.
func translator(locale string) locales.Translator {
	for _, l := range Fallback(locale) {
		name := strings.ReplaceAll(l, "-", "_")
		if t, ok := translators.Load(name); ok {
			return t.(locales.Translator)
		}
		if mk, ok := cldrLocales[name]; ok {
			t, _ := translators.LoadOrStore(name, mk())
			return t.(locales.Translator)
		}
	}
	t, _ := translators.LoadOrStore("en", cldrLocales["en"]())
	return t.(locales.Translator)
}

// Fallback lists locale and its parents, most specific first: zh-Hant-TW,
// zh-Hant, zh. Case is normalised as BCP 47 writes it (de-AT).
func Fallback(locale string) []string {
	parts := strings.Split(locale, "-")
	for i, p := range parts {
		switch {
		case i == 0:
			parts[i] = strings.ToLower(p)
		case len(p) == 2:
			parts[i] = strings.ToUpper(p)
		case len(p) == 4:
			parts[i] = strings.ToUpper(p[:1]) + strings.ToLower(p[1:])
		}
	}
	var out []string
	for n := len(parts); n > 0; n-- {
		if parts[n-1] == "" {
			continue
		}
		out = append(out, strings.Join(parts[:n], "-"))
	}
	return out
}
