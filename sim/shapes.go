package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// shape is one provider API the simulator speaks: where it is posted, how
// its request names the recipient and the message, and how that vendor
// answers, yes or no. Every shape goes through the same fault rules,
// attempt counts and deliveries; a rule's "to" names a recipient as the
// shape does (an email address, discord:ID, telegram:CHAT, teams:ID,
// webpush:ID, apns:TOKEN).
type shape struct {
	name  string
	route string // a ServeMux pattern
	// keys: a repeated Idempotency-Key replays the first answer. Only the
	// email API does this; the vendors' own APIs take no key, so a repeat
	// sends again, as theirs would.
	keys   bool
	decode func(s *Server, r *http.Request, body []byte) (sendRequest, int, error)
	// ok is the answer to a send whose first delivery is number seq.
	ok func(seq int, req *sendRequest, now time.Time) (int, http.Header, []byte)
	// problem is the vendor's refusal, retryAfter in seconds (0: none).
	problem func(status int, msg string, retryAfter int) (http.Header, []byte)
}

// shapes are the APIs a Server serves.
var shapes = []*shape{
	{name: "email", route: "POST /v1/emails", keys: true, decode: decodeEmail,
		ok: func(seq int, _ *sendRequest, _ time.Time) (int, http.Header, []byte) {
			return http.StatusOK, nil, jsonBody(map[string]string{"id": "sim_" + strconv.Itoa(seq)})
		},
		problem: func(_ int, msg string, _ int) (http.Header, []byte) { return nil, errorBody(msg) }},
	{name: "mailgun", route: "POST /v3/{domain}/messages", decode: decodeMailgun, ok: mailgunOK, problem: mailgunProblem},
	{name: "ses", route: "POST /v2/email/outbound-emails", decode: decodeSES, ok: sesOK, problem: sesProblem},
	{name: "discord", route: "POST /api/webhooks/{id}/{token}", decode: decodeDiscord, ok: discordOK, problem: discordProblem},
	{name: "telegram", route: "POST /{bot}/sendMessage", decode: decodeTelegram, ok: telegramOK, problem: telegramProblem},
	{name: "teams", route: "POST /workflows/{id}/triggers/manual/paths/invoke", decode: decodeTeams,
		ok: func(int, *sendRequest, time.Time) (int, http.Header, []byte) {
			// A workflow takes the card and answers 202, no body: the flow
			// posts it afterwards.
			return http.StatusAccepted, nil, nil
		},
		problem: teamsProblem},
	{name: "webpush", route: "POST /push/v1/{id}", decode: decodeWebPush, ok: webPushOK, problem: webPushProblem},
	{name: "apns", route: "POST /3/device/{token}", decode: decodeAPNs, ok: apnsOK, problem: apnsProblem},
}

// said is a vendor's own words for a refusal, as its API answers them
// (capitalised, punctuated): the decoders' errors.
type said string

func (s said) Error() string { return string(s) }

// writeProblem answers status with the shape's refusal.
func (sh *shape) writeProblem(w http.ResponseWriter, status int, msg string, retryAfter int) {
	h, body := sh.problem(status, msg, retryAfter)
	for k, v := range h {
		w.Header()[k] = v
	}
	if len(body) > 0 && w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// decodeMailgun reads Mailgun's form (POST /v3/DOMAIN/messages, basic
// auth api:KEY).
func decodeMailgun(_ *Server, r *http.Request, body []byte) (sendRequest, int, error) {
	if user, pass, ok := r.BasicAuth(); !ok || user != "api" || pass == "" {
		return sendRequest{}, http.StatusUnauthorized, said("Forbidden")
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return sendRequest{}, http.StatusBadRequest, said("the body is not a form")
	}
	req := sendRequest{From: form.Get("from"), To: recipients(form["to"]), Subject: form.Get("subject"),
		Text: form.Get("text"), HTML: form.Get("html"), ref: r.PathValue("domain")}
	switch {
	case req.From == "":
		return req, http.StatusBadRequest, said("'from' parameter is missing")
	case len(req.To) == 0:
		return req, http.StatusBadRequest, said("'to' parameter is missing")
	case req.Text == "" && req.HTML == "":
		return req, http.StatusBadRequest, said("Need at least one of 'text' or 'html' parameters specified")
	}
	if _, err := checkEmail(&req); err != nil {
		return req, http.StatusBadRequest, said("'to' parameter is not a valid address. please check documentation")
	}
	return req, 0, nil
}

func mailgunOK(seq int, req *sendRequest, _ time.Time) (int, http.Header, []byte) {
	return http.StatusOK, nil, jsonBody(map[string]string{"id": fmt.Sprintf("<sim_%d@%s>", seq, req.ref), "message": "Queued. Thank you."})
}

func mailgunProblem(status int, msg string, _ int) (http.Header, []byte) {
	if status == http.StatusUnauthorized {
		return header("Content-Type", "text/plain; charset=utf-8"), []byte("Forbidden")
	}
	return nil, jsonBody(map[string]string{"message": msg})
}

// decodeSES reads SES v2's SendEmail JSON. The signature is checked for
// its form (SigV4 for the ses service), not its value: the simulator does
// not hold the secret.
func decodeSES(_ *Server, r *http.Request, body []byte) (sendRequest, int, error) {
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=") || !strings.Contains(auth, "/ses/aws4_request") {
		return sendRequest{}, http.StatusForbidden, said("Missing Authentication Token: want a SigV4 Authorization for the ses service")
	}
	var b struct {
		FromEmailAddress string
		Destination      struct{ ToAddresses []string }
		Content          struct {
			Simple struct {
				Subject struct{ Data string }
				Body    struct{ Text, HTML *struct{ Data string } }
			}
		}
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return sendRequest{}, http.StatusBadRequest, said("the body is not SendEmail's JSON")
	}
	req := sendRequest{From: b.FromEmailAddress, To: b.Destination.ToAddresses, Subject: b.Content.Simple.Subject.Data}
	if t := b.Content.Simple.Body.Text; t != nil {
		req.Text = t.Data
	}
	if status, err := checkEmail(&req); err != nil {
		return req, status, err
	}
	return req, 0, nil
}

func sesOK(seq int, _ *sendRequest, _ time.Time) (int, http.Header, []byte) {
	return http.StatusOK, nil, jsonBody(map[string]string{"MessageId": fmt.Sprintf("0100019300000000-sim-%06d-000000", seq)})
}

// sesProblem names the error as SES does, in X-Amzn-ErrorType.
func sesProblem(status int, msg string, _ int) (http.Header, []byte) {
	name := map[int]string{400: "MessageRejected", 401: "UnrecognizedClientException", 403: "AccessDeniedException",
		404: "NotFoundException", 413: "BadRequestException", 422: "BadRequestException", 429: "TooManyRequestsException",
		503: "ServiceUnavailable"}[status]
	if name == "" {
		name = "InternalFailure"
	}
	return header("X-Amzn-ErrorType", name+":http://internal.amazon.com/coral/com.amazonaws.sesv2/"), jsonBody(map[string]string{"message": msg})
}

// decodeDiscord reads an execute-webhook call (?wait=true).
func decodeDiscord(_ *Server, r *http.Request, body []byte) (sendRequest, int, error) {
	var b struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return sendRequest{}, http.StatusBadRequest, said("The request body contains invalid JSON.")
	}
	if strings.TrimSpace(b.Content) == "" {
		return sendRequest{}, http.StatusBadRequest, said("Cannot send an empty message")
	}
	to := "discord:" + r.PathValue("id")
	if t := r.URL.Query().Get("thread_id"); t != "" {
		to += "/" + t
	}
	return sendRequest{To: recipients{to}, Text: b.Content, ref: r.PathValue("id")}, 0, nil
}

func discordOK(seq int, req *sendRequest, now time.Time) (int, http.Header, []byte) {
	return http.StatusOK, nil, jsonBody(map[string]any{"id": strconv.Itoa(1300000000000000000 + seq), "type": 0,
		"content": req.Text, "channel_id": "1300000000000000000", "webhook_id": req.ref, "timestamp": now.UTC().Format(time.RFC3339)})
}

func discordProblem(status int, msg string, retryAfter int) (http.Header, []byte) {
	if status == http.StatusTooManyRequests {
		return nil, jsonBody(map[string]any{"message": "You are being rate limited.", "retry_after": float64(retryAfter), "global": false})
	}
	code := 0
	if status == http.StatusNotFound {
		msg, code = "Unknown Webhook", 10015
	}
	return nil, jsonBody(map[string]any{"message": msg, "code": code})
}

// decodeTelegram reads sendMessage's JSON (POST /botTOKEN/sendMessage).
func decodeTelegram(_ *Server, r *http.Request, body []byte) (sendRequest, int, error) {
	if bot := r.PathValue("bot"); !strings.HasPrefix(bot, "bot") || !strings.Contains(bot, ":") {
		return sendRequest{}, http.StatusUnauthorized, said("Unauthorized")
	}
	var b struct {
		ChatID json.RawMessage `json:"chat_id"`
		Text   string          `json:"text"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return sendRequest{}, http.StatusBadRequest, said("Bad Request: the body is not JSON")
	}
	chat := strings.Trim(string(b.ChatID), `"`)
	switch {
	case chat == "" || chat == "null":
		return sendRequest{}, http.StatusBadRequest, said("Bad Request: chat_id is empty")
	case strings.TrimSpace(b.Text) == "":
		return sendRequest{}, http.StatusBadRequest, said("Bad Request: message text is empty")
	}
	return sendRequest{To: recipients{"telegram:" + chat}, Text: b.Text, ref: chat}, 0, nil
}

func telegramOK(seq int, req *sendRequest, now time.Time) (int, http.Header, []byte) {
	var chat any = req.ref
	if n, err := strconv.ParseInt(req.ref, 10, 64); err == nil {
		chat = n
	}
	return http.StatusOK, nil, jsonBody(map[string]any{"ok": true, "result": map[string]any{
		"message_id": seq, "date": now.Unix(), "chat": map[string]any{"id": chat}, "text": req.Text}})
}

func telegramProblem(status int, msg string, retryAfter int) (http.Header, []byte) {
	b := map[string]any{"ok": false, "error_code": status, "description": msg}
	switch status {
	case http.StatusTooManyRequests:
		b["description"] = fmt.Sprintf("Too Many Requests: retry after %d", max(retryAfter, 1))
		b["parameters"] = map[string]int{"retry_after": max(retryAfter, 1)}
	case http.StatusForbidden:
		b["description"] = "Forbidden: bot was blocked by the user"
	case http.StatusNotFound:
		b["description"] = "Not Found"
	default:
		if status >= 500 {
			b["description"] = "Internal Server Error"
		} else if status == http.StatusBadRequest && !strings.HasPrefix(msg, "Bad Request") {
			b["description"] = "Bad Request: " + msg
		}
	}
	return nil, jsonBody(b)
}

// decodeTeams reads a Workflows webhook's message: an Adaptive Card whose
// first text block is the subject when there are more.
func decodeTeams(_ *Server, r *http.Request, body []byte) (sendRequest, int, error) {
	if r.URL.Query().Get("sig") == "" {
		return sendRequest{}, http.StatusUnauthorized, said("The request must be authenticated only by Shared Access scheme.")
	}
	var b struct {
		Attachments []struct {
			ContentType string `json:"contentType"`
			Content     struct {
				Body []struct {
					Text    string `json:"text"`
					Inlines []struct {
						Text string `json:"text"`
					} `json:"inlines"`
				} `json:"body"`
			} `json:"content"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal(body, &b); err != nil || len(b.Attachments) == 0 ||
		b.Attachments[0].ContentType != "application/vnd.microsoft.card.adaptive" {
		return sendRequest{}, http.StatusBadRequest, said("the body is not a message with an Adaptive Card attachment")
	}
	var texts []string
	for _, block := range b.Attachments[0].Content.Body {
		t := block.Text
		for _, in := range block.Inlines {
			t += in.Text
		}
		texts = append(texts, t)
	}
	req := sendRequest{To: recipients{"teams:" + r.PathValue("id")}}
	switch len(texts) {
	case 0:
		return req, http.StatusBadRequest, said("the card has no text")
	case 1:
		req.Text = texts[0]
	default:
		req.Subject, req.Text = texts[0], strings.Join(texts[1:], "\n")
	}
	return req, 0, nil
}

func teamsProblem(status int, msg string, _ int) (http.Header, []byte) {
	code := map[int]string{400: "InvalidRequestContent", 401: "DirectApiAuthorizationRequired", 403: "AuthorizationFailed",
		404: "WorkflowNotFound", 429: "WorkflowRequestsThrottled"}[status]
	if code == "" {
		code = "ServiceUnavailable"
		if status != http.StatusServiceUnavailable {
			code = "InternalServerError"
		}
	}
	return nil, jsonBody(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// decodeAPNs reads a push to a device token over HTTP/2, as APNs takes
// it: a provider token, the app's topic, the aps dictionary.
func decodeAPNs(_ *Server, r *http.Request, body []byte) (sendRequest, int, error) {
	token := r.PathValue("token")
	switch {
	case r.ProtoMajor != 2 || r.TLS == nil:
		return sendRequest{}, http.StatusHTTPVersionNotSupported, said("APNs speaks HTTP/2 over TLS only (edgerelay sim --tls-listen)")
	case !strings.HasPrefix(r.Header.Get("Authorization"), "bearer "):
		return sendRequest{}, http.StatusForbidden, said("MissingProviderToken")
	case r.Header.Get("apns-topic") == "":
		return sendRequest{}, http.StatusBadRequest, said("MissingTopic")
	case token == "" || len(token)%2 != 0 || strings.Trim(strings.ToLower(token), "0123456789abcdef") != "":
		return sendRequest{}, http.StatusBadRequest, said("BadDeviceToken")
	}
	var b struct {
		APS struct {
			Alert json.RawMessage `json:"alert"`
		} `json:"aps"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return sendRequest{}, http.StatusBadRequest, said("PayloadEmpty")
	}
	req := sendRequest{To: recipients{"apns:" + strings.ToLower(token)}, ref: r.Header.Get("apns-id")}
	var alert struct{ Title, Body string }
	if json.Unmarshal(b.APS.Alert, &alert) != nil {
		_ = json.Unmarshal(b.APS.Alert, &req.Text) // a plain string alert
	}
	if alert.Title != "" || alert.Body != "" {
		req.Subject, req.Text = alert.Title, alert.Body
	}
	if req.ref == "" {
		req.ref = "00000000-0000-4000-8000-000000000000"
	}
	return req, 0, nil
}

func apnsOK(_ int, req *sendRequest, _ time.Time) (int, http.Header, []byte) {
	return http.StatusOK, header("apns-id", req.ref), nil
}

// apnsProblem is {"reason": …}, the reason Apple gives for the status.
func apnsProblem(status int, msg string, _ int) (http.Header, []byte) {
	reason := map[int]string{400: "DeviceTokenNotForTopic", 401: "InvalidProviderToken", 403: "InvalidProviderToken",
		404: "BadPath", 405: "MethodNotAllowed", 410: "Unregistered", 413: "PayloadTooLarge", 422: "BadPath",
		429: "TooManyRequests", 503: "ServiceUnavailable"}[status]
	if !strings.Contains(msg, " ") && msg != "" {
		reason = msg // a decoder's own reason
	}
	if reason == "" {
		reason = "InternalServerError"
	}
	return nil, jsonBody(map[string]string{"reason": reason})
}
