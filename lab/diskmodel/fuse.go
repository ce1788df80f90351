package diskmodel

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is a loopback node whose files are served through the model.
type node struct {
	*fs.LoopbackNode
	disk *Disk
}

var _ fs.NodeOpener = (*node)(nil)

// Open opens the backing file without O_DIRECT (the backing store is
// memory; the model is the disk) and replies FOPEN_DIRECT_IO so the kernel
// keeps no page cache for the LUN files: every block request of a loop
// device reaches the queue, as it would reach a real array.
// FOPEN_PARALLEL_DIRECT_WRITES matters as much: without it the kernel
// serialises direct writes to one file on its inode lock, so four writers
// on one LUN would put only one request at a time into the shared queue
// (measured: writes waited 26 ms while reads waited 9 ms).
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	p := filepath.Join(n.RootData.Path, n.Path(n.Root()))
	flags &^= syscall.O_DIRECT | syscall.O_APPEND
	f, err := os.OpenFile(p, int(flags), 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fs.ToErrno(err)
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	return &file{LoopbackFile: fs.NewLoopbackFileFromOS(f), f: f, ino: ino, disk: n.disk}, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES, 0
}

type file struct {
	*fs.LoopbackFile
	f    *os.File
	ino  uint64
	disk *Disk
}

func (f *file) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.disk.Wait(false, f.ino, off, len(dest))
	n, err := f.f.ReadAt(dest, off)
	if err != nil && n == 0 && !isEOF(err) {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.disk.Wait(true, f.ino, off, len(data))
	return f.LoopbackFile.Write(ctx, data, off)
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }

// WrapChild makes every node below the root a model node, so files found
// by Lookup or made by Create open through the queue.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if lb, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: lb, disk: n.disk}
	}
	return ops
}

var _ fs.NodeWrapChilder = (*node)(nil)

// Mount serves dir (the backing store) at mountpoint through disk. The
// returned server's Unmount stops it.
func Mount(dir, mountpoint string, disk *Disk) (*fuse.Server, error) {
	st := syscall.Stat_t{}
	if err := syscall.Stat(dir, &st); err != nil {
		return nil, err
	}
	root := &fs.LoopbackRoot{Path: dir, Dev: uint64(st.Dev)}
	rootNode := &node{LoopbackNode: &fs.LoopbackNode{RootData: root}, disk: disk}
	opts := &fs.Options{MountOptions: fuse.MountOptions{
		AllowOther:    true,
		DirectMount:   true,
		FsName:        "sanqos-pool",
		Name:          "sanqos",
		MaxBackground: 128, // loop devices issue async direct I/O: don't queue it in the kernel
		MaxWrite:      1 << 20,
		// Without async DIO the kernel completes a loop device's direct
		// request synchronously, so the loop worker holds one request per
		// LUN and the rest wait in the block layer, not in our queue.
		ExtraCapabilities: fuse.CAP_ASYNC_DIO,
	}}
	return fs.Mount(mountpoint, rootNode, opts)
}
