package game

import (
	"fmt"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/mcnode/mcnode"
)

// The screen is drawn for a terminal of at least MinWidth x MinHeight.
const MinWidth, MinHeight = 80, 24

// panelWidth is the side panel's width: what MinWidth leaves beside the
// arena and the column between them.
const panelWidth = MinWidth - (Width + 2) - 1

// UI is the terminal screen of one player (or spectator), a Bubble Tea
// model.
type UI struct {
	p      *Player
	width  int
	height int
	log    []string // the latest events, newest last
	events chan Event
	quit   bool
}

// NewUI returns the screen of p. Pass its Event method as p's
// Config.OnEvent (through a channel: see Events) to show the news.
func NewUI(p *Player, events chan Event) *UI {
	return &UI{p: p, events: events, width: MinWidth, height: MinHeight}
}

type tickMsg time.Time

type eventMsg Event

// Init starts the screen's refresh.
func (u *UI) Init() tea.Cmd { return tea.Batch(u.tick(), u.next()) }

func (u *UI) tick() tea.Cmd {
	return tea.Tick(100*time.Millisecond, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// next waits for the next event to show.
func (u *UI) next() tea.Cmd {
	return func() tea.Msg { return eventMsg(<-u.events) }
}

// Update handles keys, events, resizes and the refresh tick.
func (u *UI) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch m := msg.(type) {
	case tea.WindowSizeMsg:
		u.width, u.height = m.Width, m.Height
	case tea.KeyPressMsg:
		switch m.String() {
		case "q", "ctrl+c", "esc":
			u.quit = true
			return u, tea.Quit
		case "up", "w", "k":
			u.p.Move(0, -1)
		case "down", "s", "j":
			u.p.Move(0, 1)
		case "left", "a", "h":
			u.p.Move(-1, 0)
		case "right", "d", "l":
			u.p.Move(1, 0)
		}
	case eventMsg:
		u.log = append(u.log, Event(m).Text())
		if len(u.log) > 3 {
			u.log = u.log[len(u.log)-3:]
		}
		return u, u.next()
	case tickMsg:
		return u, u.tick()
	}
	return u, nil
}

var (
	styleBorder = lipgloss.NewStyle().Foreground(lipgloss.Color("8"))
	styleMe     = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("14"))
	styleOther  = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("12"))
	styleOut    = lipgloss.NewStyle().Foreground(lipgloss.Color("8"))
	styleHealth = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("10"))
	stylePoints = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("11"))
	stylePrize  = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("13"))
	styleMark   = lipgloss.NewStyle().Foreground(lipgloss.Color("9"))
	styleTitle  = lipgloss.NewStyle().Bold(true)
	styleDim    = lipgloss.NewStyle().Foreground(lipgloss.Color("8"))
)

// glyph is a power-up's symbol.
func glyph(k Kind) string {
	switch k {
	case Health:
		return styleHealth.Render("+")
	case Prize:
		return stylePrize.Render("*")
	}
	return stylePoints.Render("$")
}

// View draws the arena, the side panel, the news and the help line.
func (u *UI) View() tea.View {
	v := tea.NewView(u.Render())
	v.AltScreen = true
	return v
}

// Render returns the screen as text with colours.
func (u *UI) Render() string {
	if u.quit {
		return ""
	}
	if u.width < MinWidth || u.height < MinHeight {
		return fit(fmt.Sprintf("The game needs a %dx%d terminal;\nthis one is %dx%d.\nq quits.", MinWidth, MinHeight, u.width, u.height),
			u.width, u.height)
	}
	s := u.p.Snapshot()
	st, err := u.p.Status()
	var b strings.Builder
	mode := "?"
	if err == nil {
		mode = fmt.Sprintf("%s mode, %s", st.Mode, st.Protocol)
		if st.Coterie != "" {
			mode += "/" + st.Coterie
		}
	}
	const title = "mcnode game"
	head := fmt.Sprintf("  round %d, first to %d  ", s.Round, s.Target)
	mode = truncate(mode, MinWidth-len(title)-len(head))
	fmt.Fprintf(&b, "%s%s%s\n", styleTitle.Render(title), head, styleDim.Render(mode))
	arena := u.arena(s)
	panel := u.panel(s, st, err == nil)
	b.WriteString(lipgloss.JoinHorizontal(lipgloss.Top, arena, " ", panel))
	b.WriteString("\n")
	for i := range 3 {
		line := ""
		if i < len(u.log) {
			line = u.log[i]
		}
		b.WriteString(truncate(line, u.width-1) + "\n")
	}
	help := "arrows/WASD move  q quits   " + glyph(Health) + " health  " + glyph(Points) + " points  " + glyph(Prize) + " prize  " +
		styleMe.Render("@") + " you"
	if u.p.cfg.Watch {
		help = "watching: q quits   " + glyph(Health) + " health  " + glyph(Points) + " points  " + glyph(Prize) + " prize"
	}
	b.WriteString(help)
	return b.String()
}

// arena draws the grid in a border, Width+2 columns and Height+2 rows.
func (u *UI) arena(s Snapshot) string {
	grid := make([][]string, Height)
	for y := range grid {
		grid[y] = make([]string, Width)
		for x := range grid[y] {
			grid[y][x] = " "
		}
	}
	for _, pu := range s.PowerUps {
		grid[pu.Y][pu.X] = glyph(pu.Kind)
	}
	for _, o := range s.Others {
		c := styleOther.Render(initial(o.Name))
		if o.Out {
			c = styleOut.Render(initial(o.Name))
		}
		grid[o.Y][o.X] = c
	}
	for _, m := range s.Marks {
		for i, r := range []rune(m.Text) {
			if m.X+i < Width {
				grid[m.Y][m.X+i] = styleMark.Render(string(r))
			}
		}
	}
	if !u.p.cfg.Watch {
		me := styleMe.Render("@")
		if s.Me.Out {
			me = styleOut.Render("@")
		}
		grid[s.Me.Y][s.Me.X] = me
	}
	var b strings.Builder
	b.WriteString(styleBorder.Render("┌"+strings.Repeat("─", Width)+"┐") + "\n")
	for _, row := range grid {
		b.WriteString(styleBorder.Render("│") + strings.Join(row, "") + styleBorder.Render("│") + "\n")
	}
	b.WriteString(styleBorder.Render("└" + strings.Repeat("─", Width) + "┘"))
	return b.String()
}

// initial is a player's one-letter mark: the last character of its name.
func initial(name string) string {
	r := []rune(name)
	if len(r) == 0 {
		return "?"
	}
	return string(r[len(r)-1])
}

// panel is the side panel: the players, the group, the legend. It is at
// most as tall as the arena and panelWidth wide, so that the screen fits
// MinWidth x MinHeight: the players the rows left below the rest have no
// room for are counted, not shown (you, first, always are).
func (u *UI) panel(s Snapshot, st mcnode.Status, ok bool) string {
	players := s.Others
	if !u.p.cfg.Watch {
		players = append([]State{s.Me}, players...)
	}
	var sent, core uint64
	var won int
	for _, pl := range players {
		sent += pl.Sent
		core += pl.Core
		won += pl.Won
	}
	// The lines below the players, plain (styled ones are short).
	foot := []string{""}
	add := func(format string, args ...any) {
		foot = append(foot, truncate(fmt.Sprintf(format, args...), panelWidth))
	}
	if ok {
		add("mode      %s", st.Mode)
		proto := st.Protocol
		if st.Coterie != "" {
			proto += "/" + st.Coterie
		}
		add("protocol  %s", proto)
		if st.Mode == mcnode.Multicast {
			add("server    node %d", st.Server)
		} else {
			add("quorum    %v", st.Quorum)
		}
		add("members   %d", len(st.Members))
	}
	unit := "datagrams"
	if ok && st.Mode == mcnode.Quorum {
		unit = "messages"
	}
	if won > 0 {
		add("%s per pickup: %.1f", unit, float64(core)/float64(won))
		if sent > core {
			add("  + %.1f membership", float64(sent-core)/float64(won))
		}
	} else {
		add("%s per pickup: -", unit)
	}
	if len(s.Wins) > 0 {
		w := s.Wins[len(s.Wins)-1]
		add("last round: %s, %d", w.Player, w.Score)
	}
	if s.Me.Out && !u.p.cfg.Watch {
		foot = append(foot, styleMark.Render("you are out: respawning"))
	} else if s.Me.Picking != "" {
		foot = append(foot, stylePoints.Render("picking up..."))
	}

	lines := []string{fmt.Sprintf("%-6s %4s %3s %3s %7s %9s", "player", "pts", "hp", "win", "won/lst", "p50/p99ms")}
	shown := players
	if room := Height + 2 - len(lines) - len(foot); len(players) > room {
		shown = players[:room-1] // and a line that counts the rest
	}
	for _, pl := range shown {
		line := truncate(fmt.Sprintf("%-6s %4d %3d %3d %3d/%-3d %4.1f/%-4.1f", truncate(pl.Name, 6), pl.Score, pl.Health, pl.Wins, pl.Won, pl.Lost,
			float64(pl.P50)/1000, float64(pl.P99)/1000), panelWidth)
		switch {
		case pl.Out:
			line = styleOut.Render(line)
		case pl.Name == s.Me.Name && !u.p.cfg.Watch:
			line = styleMe.Render(line)
		}
		lines = append(lines, line)
	}
	if n := len(players) - len(shown); n > 0 {
		lines = append(lines, fmt.Sprintf("+%d more", n))
	}
	return strings.Join(append(lines, foot...), "\n")
}

// fit cuts plain text to w columns and h lines.
func fit(text string, w, h int) string {
	var lines []string
	for _, line := range strings.Split(text, "\n") {
		lines = append(lines, wrap(line, w)...)
	}
	lines = lines[:min(len(lines), max(h, 0))]
	for i, line := range lines {
		lines[i] = truncate(line, w)
	}
	return strings.Join(lines, "\n")
}

// wrap breaks a line of words into lines of at most w columns where it can
// (a longer word is cut by fit): in a narrow terminal the message that asks
// for a larger one was cut off mid-word (black-box round).
func wrap(line string, w int) []string {
	var out []string
	cur := ""
	for _, word := range strings.Fields(line) {
		switch {
		case cur == "":
			cur = word
		case len([]rune(cur))+1+len([]rune(word)) <= w:
			cur += " " + word
		default:
			out = append(out, cur)
			cur = word
		}
	}
	return append(out, cur)
}

// truncate cuts s to n columns (s is plain text of one column a rune: the
// names are ASCII, ValidName).
func truncate(s string, n int) string {
	r := []rune(s)
	if n = max(n, 0); len(r) > n {
		return string(r[:n])
	}
	return s
}
