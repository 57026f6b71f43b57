package deploy_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var commentedSettingRE = regexp.MustCompile(`^#([a-z][a-z0-9-]*)(?:\s+(.*))?$`)

// deploy/sluice.conf, the example config file of the systemd unit.
func TestConfigFile(t *testing.T) {
	const file = "deploy/sluice.conf"
	src := read(t, file)
	checkEnvNames(t, file, src, nil)
	known := settingNames()
	defaults := defaultSettings(t)
	var prose strings.Builder
	for i, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		where := fmt.Sprintf("%s:%d", file, i+1)
		if line == "" {
			continue
		}
		// "#name value" is a setting left at its default; "# text" is prose.
		if m := commentedSettingRE.FindStringSubmatch(line); m != nil {
			if !known[m[1]] || m[1] == "config" {
				t.Errorf("%s: #%s is not a setting a config file may hold", where, m[1])
			} else if def := defaults[m[1]]; def != "" && strings.TrimSpace(m[2]) != def {
				t.Errorf("%s: #%s %s, but its default is %s", where, m[1], m[2], def)
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			prose.WriteString(line + "\n")
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		if !known[name] || name == "config" {
			t.Errorf("%s: %q is not a setting a config file may hold", where, name)
		}
	}
	checkFlags(t, file+" comments", prose.String(), "help")

	// The settings themselves: sluice reads the file as the unit does.
	cfg := loadConfig(t, file, []string{"--config", filepath.Join(root, file)}, nil)
	if !filepath.IsAbs(cfg.DataDir) {
		t.Errorf("%s: data-dir %q should be absolute", file, cfg.DataDir)
	}
	if cfg.RequirePass == "" && cfg.ACLFile == "" {
		t.Errorf("%s: a network-facing node needs requirepass or acl-file (protected mode refuses remote clients)", file)
	}
	if cfg.LogFormat != "json" {
		t.Errorf("%s: log-format %s; journald and log shippers want json", file, cfg.LogFormat)
	}
	checkSelfInPeers(t, file, cfg)
}
