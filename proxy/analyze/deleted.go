package analyze

// deletedReply sets sem.DeletedReply for a release whose yes reply where it
// deleted the lock differs from its yes reply where a count is left
// (Redisson's unlock: 1 and 0). Where the masters' counts diverge (a master
// one level short: a re-entry it missed, a restart, a release it missed),
// one release gets both from different masters, and the engine must not
// let the "deleted" reply win a tie while a quorum may still hold the
// token (quorum's releaseYes). Left unset when one reply stands for both
// (the client then hears the same either way), or when the deleting
// states answer different replies (data the engine cannot count by).
func (a *analysis) deletedReply(sem *Semantics, f *finding, v *verdict) {
	if sem.Kind != Release && sem.Kind != ReentrantRelease {
		return
	}
	var deleted, left []Reply
	for _, j := range v.judged {
		if !j.yes {
			continue
		}
		if a.lockDeletedBy(f, j.o) {
			deleted = append(deleted, j.o.o.reply)
		} else {
			left = append(left, j.o.o.reply)
		}
	}
	if sem.AbsentIsYes {
		// Its masters without the lock answer the deleting reply too
		// (absentAnswersYes checked it), and hold nothing.
		deleted = append(deleted, sem.AbsentReply)
	}
	if len(deleted) == 0 || !sameReplies(deleted) {
		return
	}
	for _, r := range left {
		if r.String() == deleted[0].String() {
			return
		}
	}
	if len(left) == 0 && !sem.AbsentIsYes {
		return // every yes deletes: no tie to break
	}
	rep := deleted[0]
	sem.DeletedReply = &rep
}
