//! A piece of an output file as the writers take it (a range of an input file, bytes in memory,
//! or computed bytes still on their way), and the read-back that compares a written file with
//! its pieces.

use super::later::Later;
use crate::error::{Error, Result};
use crate::mapped::Mapped;
use std::path::PathBuf;

/// A piece of an output tensor.
pub(crate) enum Segment<'a> {
    File {
        map: &'a Mapped,
        start: u64,
        len: u64,
    },
    Memory(std::borrow::Cow<'a, [u8]>),
    /// Computed bytes that may not be there yet.
    Later(&'a Later),
    /// `len` bytes from `start` of computed bytes that may not be there yet.
    LaterPart(&'a Later, u64, u64),
    /// `len` bytes that depend on the bytes before them (a zip's data descriptors and central
    /// directory): made by the writer's one pass (`pass::Pass`) when it reaches them.
    Pass(u64),
}

impl Segment<'_> {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Segment::File { len, .. } => *len,
            Segment::Memory(b) => b.len() as u64,
            Segment::Later(l) => l.len(),
            Segment::LaterPart(_, _, len) => *len,
            Segment::Pass(len) => *len,
        }
    }

    /// Whether its bytes can be had without waiting (computed bytes not yet there cannot).
    pub(crate) fn ready(&self) -> bool {
        match self {
            Segment::Later(l) | Segment::LaterPart(l, ..) => l.is_set(),
            _ => true,
        }
    }

    /// Where the segment's bytes are: a range of its file, or bytes in memory (computed bytes
    /// waited for if need be). A part of computed bytes that lies past their end is an error,
    /// never an empty slice; so are bytes only the writer's pass makes.
    pub(crate) fn source(&self) -> Result<Source<'_>> {
        match self {
            Segment::File { map, start, len } => Ok(Source::File {
                map,
                start: *start,
                len: *len,
            }),
            Segment::Memory(b) => Ok(Source::Memory(b)),
            Segment::Later(l) => l.wait().map(Source::Memory),
            Segment::LaterPart(l, start, len) => {
                let all = l.wait()?;
                usize::try_from(*start)
                    .ok()
                    .zip(usize::try_from(*len).ok())
                    .and_then(|(s, n)| all.get(s..s.checked_add(n)?))
                    .map(Source::Memory)
                    .ok_or_else(|| {
                        unplanned(format!(
                            "the new rows hold {} bytes, but bytes {start}..+{len} of them were laid out",
                            all.len()
                        ))
                    })
            }
            Segment::Pass(len) => Err(unplanned(format!(
                "{len} bytes that only the writer's pass makes were asked for elsewhere"
            ))),
        }
    }

    /// Hand the segment's bytes to `f` in bounded chunks (file ranges straight from the map).
    pub(crate) fn stream(&self, mut f: impl FnMut(&[u8]) -> bool) -> Result<()> {
        match self.source()? {
            Source::File { map, start, len } => map.stream_while(start, len, f),
            Source::Memory(b) => {
                for c in b.chunks(READ_CHUNK) {
                    if !f(c) {
                        break;
                    }
                }
                Ok(())
            }
        }
    }
}

/// Where a segment's bytes are, once computed ones are there.
pub(crate) enum Source<'b> {
    File {
        map: &'b Mapped,
        start: u64,
        len: u64,
    },
    Memory(&'b [u8]),
}

/// The output's bytes did not come out as laid out, found where the destination is not known:
/// the writer that meets it names the destination (`output::about_output`).
pub(crate) fn unplanned(problem: String) -> Error {
    Error::Verify {
        path: PathBuf::new(),
        problem,
    }
}

/// Bytes per chunk when hashing and comparing computed bytes (file ranges go by
/// [`Mapped::stream_while`](crate::mapped::Mapped::stream_while)'s chunks).
const READ_CHUNK: usize = 8 << 20;

/// Compare a written tensor, read back through the output's map, with its segments, a chunk at a
/// time (both sides leave the resident set as they go). Returns the offset of the first difference.
///
/// With `sample` (the grid a direct write was made on), ranges copied from an input are compared
/// only at their ends and where they cross a grid line, a block either side: every piece of
/// arithmetic the writer does (where a segment starts and ends, where a write starts and ends) is
/// read back from the disk, at the cost of a few blocks per chunk. Computed bytes are always
/// compared in full.
pub(crate) fn differs(
    out: &Mapped,
    start: u64,
    segments: &[Segment<'_>],
    sample: Option<u64>,
) -> Result<Option<u64>> {
    let (mut at, mut mismatch) = (0u64, None);
    for seg in segments {
        if let (
            Some(grid),
            Segment::File {
                map,
                start: from,
                len,
            },
        ) = (sample, seg)
        {
            for (a, b) in sample_windows(start + at, *len, grid) {
                let (Some(back), Some(want)) =
                    (out.slice(start + at + a, b - a), map.slice(from + a, b - a))
                else {
                    return Err(Error::Verify {
                        path: out.path.clone(),
                        problem: format!("ends inside a tensor (byte {} of it)", at + a),
                    });
                };
                if let Some(first) = first_difference(back, want) {
                    return Ok(Some(at + a + first));
                }
                out.release(start + at + a, b - a);
                map.release(from + a, b - a);
            }
            at += len;
            continue;
        }
        let mut short = false;
        seg.stream(|c| {
            let Some(back) = out.slice(start + at, c.len() as u64) else {
                short = true;
                return false;
            };
            mismatch = first_difference(back, c).map(|first| at + first);
            out.release(start + at, c.len() as u64);
            at += c.len() as u64;
            mismatch.is_none()
        })?;
        if short {
            return Err(Error::Verify {
                path: out.path.clone(),
                problem: format!("ends inside a tensor (byte {at} of it)"),
            });
        }
        if mismatch.is_some() {
            break;
        }
    }
    Ok(mismatch)
}

/// Where two equally long byte runs first differ, if they do.
fn first_difference(back: &[u8], want: &[u8]) -> Option<u64> {
    (back != want).then(|| back.iter().zip(want).take_while(|(x, y)| x == y).count() as u64)
}

/// The ranges of a `len`-byte segment written at file offset `pos` that a sampled read-back
/// compares: one block at each end, and one block either side of each multiple of `grid`
/// inside it. Sorted, disjoint, relative to the segment.
fn sample_windows(pos: u64, len: u64, grid: u64) -> Vec<(u64, u64)> {
    const W: u64 = 4096;
    let mut cuts = vec![0];
    let mut g = (pos / grid + 1) * grid;
    while g < pos + len {
        cuts.push(g - pos);
        g += grid;
    }
    cuts.push(len);
    let mut windows: Vec<(u64, u64)> = Vec::new();
    for c in cuts {
        let (a, b) = (c.saturating_sub(W), (c + W).min(len));
        match windows.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => windows.push((a, b)),
        }
    }
    windows.retain(|(a, b)| a < b);
    windows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_of_new_rows_past_their_end_is_an_error_not_an_empty_piece() {
        let later = Later::ready(vec![1, 2, 3, 4]);
        let inside = Segment::LaterPart(&later, 1, 3);
        assert!(matches!(
            inside.source().unwrap(),
            Source::Memory(&[2, 3, 4])
        ));
        for part in [
            Segment::LaterPart(&later, 2, 3),
            Segment::LaterPart(&later, 5, 0),
        ] {
            let Err(e) = part.source() else {
                panic!("a part past the end was read")
            };
            assert!(matches!(&e, Error::Verify { .. }), "{e:?}");
            assert!(e.to_string().contains("the new rows hold 4 bytes"), "{e}");
        }
    }

    #[test]
    fn sample_windows_are_a_block_around_each_end_and_each_grid_line() {
        const W: u64 = 4096;
        for (pos, len, grid) in [
            (0, 10, 4096),
            (100, 100_000, 8192),
            (8191, 3, 8192),
            (5, 8192 * 5, 8192),
            (8192, 8192 * 3, 8192),
            (0, 0, 4096),
        ] {
            let w = sample_windows(pos, len, grid);
            assert!(
                w.windows(2).all(|p| p[0].1 < p[1].0),
                "sorted, apart: {w:?}"
            );
            let lines: Vec<u64> = (pos / grid + 1..)
                .map(|k| k * grid)
                .take_while(|&g| g < pos + len)
                .map(|g| g - pos)
                .collect();
            for x in 0..len {
                let near = [0, len]
                    .iter()
                    .chain(&lines)
                    .any(|&c| x + W >= c && x < c + W);
                let inside = w.iter().any(|&(a, b)| a <= x && x < b);
                assert_eq!(inside, near, "byte {x} of ({pos}, {len}, {grid})");
            }
        }
    }
}
