package capture

import "time"

const (
	// heartbeatEvery is how often a reading agent says so in the pinned
	// heartbeat; a restart's unread window is measured against it.
	heartbeatEvery = time.Second
	// orphanAfter: pinned probes unread for longer were left by an agent
	// that was removed without `correlator uninstall` (or never came back).
	orphanAfter = 10 * time.Minute
)

// Window is what a start found about the time pinned probes ran with no
// agent reading them.
type Window struct {
	Found    bool          // pinned probes were found running
	Unread   time.Duration // since the last heartbeat
	Drops    uint64        // ring drops counted in that time
	Orphaned bool          // unread for longer than orphanAfter
}

// Window reports the unread window found at start.
func (p *Probe) Window() Window { return p.window }

// Handover reports what the start took over from other builds.
func (p *Probe) Handover() HandoverStats { return p.handed }

// ProcfsRoots counts the session roots Bootstrap found only through procfs.
func (p *Probe) ProcfsRoots() int { return int(p.procfsRoots.Load()) }

// noteWindow records (and logs) a window ending now, from its heartbeat.
func (p *Probe) noteWindow(hb heartbeat, dropsNow uint64, what string) {
	w := Window{Found: true}
	if now := bootNow(); now > hb.BootNs {
		w.Unread = time.Duration(now - hb.BootNs)
	}
	if dropsNow > hb.Drops {
		w.Drops = dropsNow - hb.Drops
	}
	w.Orphaned = w.Unread > orphanAfter
	if w.Unread > p.window.Unread || !p.window.Found {
		p.window = w
	}
	ev := p.log.Info()
	msg := what + ": the kernel kept watching while no agent read"
	if w.Orphaned {
		ev = p.log.Warn()
		msg = what + ": pinned probes no agent read for a long time (an agent removed without `correlator uninstall`?)"
	}
	ev.Dur("unread", w.Unread).Uint64("drops", w.Drops).Uint32("last_pid", hb.PID).
		Time("last_heartbeat", time.Unix(0, hb.WallNs)).Msg(msg)
}
