package providers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

var _ Provider = (*Teams)(nil)

// teamsPassed are the query parameters of a Teams workflow URL (a Power
// Automate or Logic Apps trigger): they go to Microsoft as they came. sig
// is the URL's signature, its credential.
var teamsPassed = []string{"api-version", "sp", "sv", "sig"}

var teamsKind = &Kind{
	Name: "teams", Schemes: httpSchemes("teams"),
	URLs: []string{"teams+https://….powerautomate.com/…/invoke?api-version=…&sp=…&sv=…&sig=…", "teams+https://….webhook.office.com/webhookb2/…"},
	Summary: "Microsoft Teams through a Workflows webhook (\"send webhook alerts to a channel\") or a legacy incoming " +
		"webhook (the path and `sig` are secrets and are never printed); subject and body as an Adaptive Card of plain " +
		"text runs (no Markdown, so nothing in them is a link or a mention); 202 from a workflow means it took the card " +
		"(the flow then posts it), a connector's 200 reporting a failed delivery is refused",
	Params: []Param{
		{"api-version", "a workflow URL's own parameter, passed on as it came"},
		{"sp", "a workflow URL's own parameter, passed on as it came"},
		{"sv", "a workflow URL's own parameter, passed on as it came"},
		{"sig", "a workflow URL's signature, its credential, passed on as it came"},
		paramConcurrency, paramName, paramTimeout},
	Keys: "no: neither workflows nor incoming webhooks take one; a resend after an unknown outcome posts a second card",
	Example: "teams+https://prod-00.westus.logic.azure.com/workflows/0123abcd/triggers/manual/paths/invoke" +
		"?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=XXXXsecretXXXX",
	build: newTeamsURL,
}

// Teams posts each message to a Microsoft Teams channel through a
// Workflows webhook URL (a Power Automate flow triggered "when a Teams
// webhook request is received") or a legacy Office 365 incoming webhook
// (teams+https://…webhook.office.com/webhookb2/…). Either is bound to one
// channel or chat, so Message.Address is not used. Build it with New: the
// URL is Microsoft's with teams+ in front.
//
// The body is a message with one Adaptive Card, the shape both take. Its
// text is in TextRuns of a RichTextBlock, which Teams does not read as
// Markdown: a notification's "[click](https://…)" stays text.
//
// The answers:
//
//	202 (workflow)                   sent: the flow took the card; posting it
//	                                  is the flow's run, which no answer reports
//	200 "1" (incoming webhook)       sent
//	200 "… delivery failed …         refused: the connector says it did not
//	    returned HTTP error N …"      post; N = 429 is overloaded, another 4xx
//	                                  is for good, anything else is retried
//	400 (a card the flow or          refused for good
//	    connector cannot read)
//	401, 403 (a wrong sig, a         refused for good
//	    policy), 404 (the flow or
//	    webhook is gone), 410, 413
//	429 with Retry-After             refused, retried after it; overloaded
//	503                              refused, retried
//	500, 502, 504, no answer after   unknown: the card may have been posted
//	    the request was written
//
// No answer marks an address invalid: the URL is the route's.
//
// Neither kind of URL takes an idempotency key, so HonoursKeys is always
// false: after an unknown, a resend may post twice.
type Teams struct {
	*httpEndpoint
}

func newTeamsURL(u *url.URL, q url.Values) (Provider, string) {
	if u.User != nil {
		return nil, "teams URLs take no credentials (the workflow or webhook URL is its own secret)"
	}
	if u.Path == "" || u.Path == "/" {
		return nil, "missing path (paste the whole Workflows or incoming-webhook URL Teams gave, with teams+ in front)"
	}
	e, problem := parseEndpoint(u, q, "teams")
	if problem != "" {
		return nil, problem
	}
	pass := url.Values{}
	for _, k := range teamsPassed {
		if !q.Has(k) {
			continue
		}
		if q.Get(k) == "" {
			return nil, "parameter " + strconv.Quote(k) + " is empty (paste the whole URL Teams gave)"
		}
		pass.Set(k, q.Get(k))
	}
	if strings.Contains(u.Path, "/workflows/") && !pass.Has("sig") {
		// A workflow URL without its signature gets 401 on every call.
		return nil, `a workflow URL needs its "sig" parameter (paste the whole URL Teams gave)`
	}
	if len(pass) > 0 {
		target, _ := url.Parse(e.url) // built by parseEndpoint from a parsed URL
		target.RawQuery = pass.Encode()
		e.url = target.String()
	}
	if !q.Has("name") {
		e.name = "teams://" + u.Host
	}
	return &Teams{httpEndpoint: e}, ""
}

// The card: a message with one Adaptive Card attachment.
type teamsMessage struct {
	Type        string            `json:"type"`
	Attachments []teamsAttachment `json:"attachments"`
}

type teamsAttachment struct {
	ContentType string    `json:"contentType"`
	ContentURL  *string   `json:"contentUrl"`
	Content     teamsCard `json:"content"`
}

type teamsCard struct {
	Schema  string          `json:"$schema"`
	Type    string          `json:"type"`
	Version string          `json:"version"`
	Body    []teamsRichText `json:"body"`
}

type teamsRichText struct {
	Type    string         `json:"type"`
	Inlines []teamsTextRun `json:"inlines"`
}

type teamsTextRun struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Weight string `json:"weight,omitempty"`
	Size   string `json:"size,omitempty"`
}

func teamsBody(m *Message) teamsMessage {
	var blocks []teamsRichText
	block := func(run teamsTextRun) {
		run.Type = "TextRun"
		blocks = append(blocks, teamsRichText{Type: "RichTextBlock", Inlines: []teamsTextRun{run}})
	}
	if m.Subject != "" {
		block(teamsTextRun{Text: m.Subject, Weight: "Bolder", Size: "Medium"})
	}
	if m.Body != "" {
		block(teamsTextRun{Text: m.Body})
	}
	return teamsMessage{Type: "message", Attachments: []teamsAttachment{{
		ContentType: "application/vnd.microsoft.card.adaptive",
		Content: teamsCard{Schema: "http://adaptivecards.io/schemas/adaptive-card.json", Type: "AdaptiveCard",
			// 1.4 is what Teams renders everywhere, its mobile clients too.
			Version: "1.4", Body: blocks},
	}}}
}

func (p *Teams) Send(ctx context.Context, m *Message) Result {
	if strings.TrimSpace(m.Subject) == "" && strings.TrimSpace(m.Body) == "" {
		return Result{Outcome: Refused, Permanent: true, Detail: "nothing to post: the message has no subject and no body"}
	}
	body, err := json.Marshal(teamsBody(m))
	if err != nil {
		return Result{Outcome: Refused, Permanent: true, Response: err.Error(), Detail: "cannot encode message"}
	}
	return teamsResult(p.post(ctx, m.Key, body))
}

// teamsFailed is how an Office 365 connector reports, in a 200, that it
// did not post: "Webhook message delivery failed with error: Microsoft
// Teams endpoint returned HTTP error 429 with ContextId …".
var teamsFailed = regexp.MustCompile(`(?i)delivery failed|returned HTTP error ([0-9]{3})`)

// teamsResult refines the shared classification: a connector's 200 that
// says it failed, and the error body of a workflow,
// {"error": {"code", "message"}}.
func teamsResult(r Result) Result {
	if r.Outcome == Sent {
		// "1" is the connector's yes, and not JSON; a workflow's 202 has
		// no body. Neither carries an id, so that note says nothing (a
		// body that could not be read still says so).
		r.Detail = strings.TrimSuffix(r.Detail, "; body is not JSON, no message id")
		if r.HTTPStatus == http.StatusOK && teamsFailed.MatchString(r.Response) {
			status := 0
			for _, m := range teamsFailed.FindAllStringSubmatch(r.Response, -1) {
				if m[1] != "" {
					status, _ = strconv.Atoi(m[1])
				}
			}
			r.Outcome = Refused
			switch {
			case status == http.StatusTooManyRequests:
				r.Overloaded = true
			case status >= 400 && status < 500:
				r.Permanent = true
			}
			addReason(&r, strings.TrimSpace(r.Response))
		}
		return r
	}
	if r.HTTPStatus < 400 {
		return r
	}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(r.Response), &e) == nil && e.Error.Code != "" {
		addReason(&r, e.Error.Code+": "+e.Error.Message)
	} else if w := strings.TrimSpace(r.Response); w != "" && !strings.HasPrefix(w, "<") && len(w) <= 200 {
		// A connector's errors are a line of text.
		addReason(&r, w)
	}
	return r
}
