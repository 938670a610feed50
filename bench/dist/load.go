package dist

import (
	"os"
	"strings"
)

// LoadAvg is the machine's 1, 5 and 15 minute load averages
// (/proc/loadavg), which every report states beside its figures because
// the machines they run on are shared; "unknown" if unreadable.
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
