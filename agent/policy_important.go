package agent

// ImportantSets is thesis 5.7's policy: named consumers are protected and
// their read wait alone is the indicator, so a resource whose other
// consumers are slow anyway is not throttled on their account. Who gets
// slowed is decided as in read-over-write (consumers that saturate the
// resource in any direction, writers above the rate threshold and the
// static throttleable set, never the important ones).
func ImportantSets() Policy { return &readOverWrite{importantOnly: true} }
