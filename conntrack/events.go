package conntrack

// Event says what happened to a flow.
type Event uint8

const (
	// EventCreated: Insert or Import added the flow.
	EventCreated Event = iota + 1
	// EventDeleted: Delete removed the flow.
	EventDeleted
	// EventExpired: Expire removed the flow after its idle timeout.
	EventExpired
)

// String returns the event's name.
func (e Event) String() string {
	switch e {
	case EventCreated:
		return "created"
	case EventDeleted:
		return "deleted"
	case EventExpired:
		return "expired"
	}
	return "unknown"
}

// EventFunc receives flow events. It is called outside the table's locks,
// on the goroutine that caused the event. The flow is passed by value so
// that the caller's Flow never escapes to the heap; the hook must be quick
// and must not allocate if the data plane's zero-allocation promise is to
// hold.
type EventFunc func(ev Event, f Flow)

// SetEventHook installs fn (nil removes it). Installing allocates once;
// delivering events allocates nothing.
func (t *Table) SetEventHook(fn EventFunc) {
	if fn == nil {
		t.hook.Store(nil)
		return
	}
	t.hook.Store(&fn)
}

func (t *Table) emit(ev Event, f *Flow) {
	if p := t.hook.Load(); p != nil {
		(*p)(ev, *f)
	}
}
