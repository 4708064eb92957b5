package providers

// Placeholders until webhook signing and email presets land.
func (w *Webhook) sign(secret string) string { return "webhook signing: not implemented yet" }

func (p *EmailHTTP) preset(name string) string {
	if name == "" {
		return ""
	}
	return "email presets: not implemented yet"
}
