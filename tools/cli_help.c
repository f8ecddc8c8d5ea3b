/*
 * cli_help.c - the help texts of the `mimi` command (`mimi --help`, `mimi <command> --help`).
 * docs/mimi.1 is the manual page; keep the two in step.
 */
#include "cli.h"

// Where and how the codec runs: the same options for encode, decode and roundtrip.
#define ENGINE_OPTIONS                                                                             \
    "  --backend B           cpu, cuda (an NVIDIA GPU, when built with CUDA) or auto (cpu)\n"      \
    "  --isa I               CPU kernels: auto, reference (the plain C definition), avx2,\n"       \
    "                        avx512 or neon (default auto: the best the CPU has)\n"                \
    "  --weights W           f32 (default) or bf16 (half the bytes; see the README for its fidelity)\n" \
    "  --precision P         GPU arithmetic with --backend cuda: strict (default, f32), fast (TF32\n" \
    "                        tensor cores), bf16kv (fast, and bfloat16 attention rings) or bf16\n" \
    "                        (bf16kv, and the SEANets' large products on bfloat16 tensor cores);\n" \
    "                        int8kv (bf16, and 8-bit attention rings: the most streams a GPU)\n"

// ---- mimi --help ----

const char USAGE_MAIN[] =
    "usage: mimi <command> [options]\n"
    "\n"
    "Kyutai's Mimi neural audio codec: 24 kHz mono audio <-> 12.5 Hz frames of integer codes\n"
    "(1920 samples per frame, codes in [0, 2048), 8 codebooks = 1.1 kbit/s by default).\n"
    "With Pocket TTS's lighter Mimi the frames are continuous latents (32 floats) instead.\n"
    "\n"
    "commands:\n"
    "  encode     audio -> codes: files of any format, rate and channel count (WAV, FLAC,\n"
    "             Ogg Vorbis/Opus, MP3, ...), or live PCM from a pipe\n"
    "  decode     codes -> audio: WAV, FLAC, Ogg, Opus, MP3, or live PCM into a pipe\n"
    "  roundtrip  encode and decode in one pass; prints bitrate, speed and SNR\n"
    "  info       describe a model, a codes or latents file, or an audio file\n"
    "  synth      write the synthetic test model (untrained weights)\n"
    "  version    print the version\n"
    "\n"
    "`mimi <command> --help` shows the options of a command; `man mimi` has the details. The\n"
    "model, a Mimi or Pocket TTS .safetensors checkpoint, is given with --model FILE or the\n"
    "MIMI_MODEL environment variable.\n"
    "\n"
    "examples:\n"
    "  export MIMI_MODEL=tokenizer-e351c8d8-checkpoint125.safetensors\n"
    "  mimi encode speech.mp3 -o speech.safetensors\n"
    "  mimi decode speech.safetensors -o decoded.flac\n"
    "  mimi encode --jobs 4 corpus/*.flac -o codes/\n"
    "  mimi roundtrip speech.wav -o decoded.wav\n"
    "  arecord -q -f S16_LE -r 24000 -c 1 -t raw | mimi encode --raw s16le - | \\\n"
    "      mimi decode --raw s16le - -o - | aplay -q -f S16_LE -r 24000 -c 1 -t raw\n";

// ---- mimi encode --help ----

const char USAGE_ENCODE[] =
    "usage: mimi encode [options] INPUT... -o OUTPUT\n"
    "\n"
    "Encodes audio into Mimi codes. Inputs are any files libsndfile reads (WAV, FLAC, Ogg\n"
    "Vorbis/Opus, MP3, AIFF, ...) at any sample rate and channel count: channels are averaged\n"
    "and the audio is resampled to 24 kHz with libsoxr (a note on stderr says so). The last\n"
    "partial frame is zero-padded: frames = ceil(samples / 1920).\n"
    "\n"
    "With a Pocket TTS model (no quantizer) each frame is a continuous latent of 32 floats:\n"
    "the files below hold float32 latents [32, frames] (.safetensors: tensor \"latents\",\n"
    "format \"mimi-latents\"), a frame stream has 32 float32 values per frame, and\n"
    "--codebooks does not apply.\n"
    "\n"
    "Outputs:\n"
    "  -o CODES.npy          int32 array of shape [codebooks, frames]\n"
    "  -o CODES.safetensors  tensor \"codes\" plus metadata (rates, codebooks, sample count,\n"
    "                        the model's XXH64) that `mimi decode` checks\n"
    "  -o DIR/               one file per input, DIR/<name>.npy (or --format safetensors);\n"
    "                        required with several inputs; created if missing\n"
    "  -o -                  a live frame stream on stdout: each frame's codes as soon as the\n"
    "                        frame is complete, as n_codebooks int32 little-endian values, or\n"
    "                        one text line with --text (the default output for stdin input)\n"
    "\n"
    "INPUT '-' reads standard input: headerless PCM with --raw (24 kHz mono unless --rate and\n"
    "--channels say otherwise), else a stream libsndfile can read from a pipe (WAV, AU, ...).\n"
    "Input is read one frame (80 ms) at a time, so a pipe adds one frame of latency; the end of\n"
    "the input flushes the last partial frame.\n"
    "\n"
    "options:\n"
    "  -o, --output PATH     the output, as above\n"
    "  --model FILE          Mimi or Pocket TTS checkpoint (.safetensors); default: $MIMI_MODEL\n"
    "  --codebooks N         codebooks per frame, 1 .. the model's count (default 8)\n"
    "  --raw s16le|f32le     the input is headerless PCM in this encoding\n"
    "  --rate R              sample rate of --raw input (default 24000)\n"
    "  --channels C          channel count of --raw input (default 1), averaged to mono\n"
    "  --text                frame streams as text lines instead of binary values\n"
    "  --format npy|safetensors  the codes format for outputs in a directory (default npy)\n"
    "  --offline             encode each signal whole (the reference's offline path);\n"
    "                        default: streaming, frame by frame. Same codes up to 10 s.\n"
    "  --group N             with --offline, files per library call (default 32 with\n"
    "                        --backend cuda, else 1): on a GPU the files of a call share\n"
    "                        each step, which is how offline throughput is reached\n"
    "  -j, --jobs N          files encoded at once, each on its own thread (default 1)\n"
    "  --threads N           threads inside each encoder step (default: the CPUs, up to 8)\n"
    ENGINE_OPTIONS
    "  --json                a JSON summary of every file on stdout\n"
    "  -q, --quiet           no notes, summaries or progress bar\n"
    "  -h, --help            this text\n"
    "\n"
    "A file that fails is reported and the others go on; the exit status is 0 only when every\n"
    "file succeeded (1 otherwise, 2 for a usage error).\n"
    "\n"
    "examples:\n"
    "  mimi encode speech.mp3 -o speech.safetensors\n"
    "  mimi encode --codebooks 32 speech.wav -o codes.npy\n"
    "  mimi encode --jobs 4 --format safetensors corpus/*.flac corpus/*.mp3 -o codes/\n"
    "  mimi encode --model pocket.safetensors speech.wav -o latents.npy\n"
    "  arecord -q -f S16_LE -r 24000 -c 1 -t raw | mimi encode --raw s16le --text -\n";

// ---- mimi decode --help ----

const char USAGE_DECODE[] =
    "usage: mimi decode [options] CODES... -o OUTPUT\n"
    "\n"
    "Decodes Mimi codes into 24 kHz mono audio (or --rate R). CODES are .npy arrays (int16 or\n"
    "int32, shape [codebooks, frames]) or .safetensors codes files from `mimi encode`, whose\n"
    "metadata is checked against the model: a file made with another model, rate or codebook\n"
    "size is refused. Every code is checked to be in [0, codebook size) before decoding. Audio\n"
    "from a .safetensors file is trimmed to the length of the encoded input.\n"
    "\n"
    "With a Pocket TTS model, CODES are latents instead: float32 .npy [32, frames] or\n"
    ".safetensors \"latents\" from `mimi encode`, every value finite; a stream is 32 float32\n"
    "values per frame (or text lines of 32 floats). Codes given to a Pocket model, and latents\n"
    "given to a Mimi model, are refused.\n"
    "\n"
    "Outputs, by extension:\n"
    "  .wav (16-bit PCM, or 32-bit float with --float), .flac (16-bit), .ogg (Vorbis),\n"
    "  .opus (Ogg/Opus; 8, 12, 16, 24 or 48 kHz), .mp3, .npy (float32 samples);\n"
    "  -o DIR/ writes DIR/<name>.wav per input (or --format); -o - writes headerless PCM on\n"
    "  stdout (--raw s16le by default), frame by frame as the codes arrive.\n"
    "\n"
    "CODES '-' reads a live frame stream from stdin: binary int32 little-endian frames of\n"
    "--codebooks values (default 8), or text lines with --text, as `mimi encode -o -` writes.\n"
    "\n"
    "options:\n"
    "  -o, --output PATH     the output, as above\n"
    "  --model FILE          Mimi or Pocket TTS checkpoint (.safetensors); default: $MIMI_MODEL\n"
    "  --codebooks N         use the first N codebooks of a file (default: all); for a stream,\n"
    "                        the codes per frame (default 8)\n"
    "  --raw s16le|f32le     write headerless PCM (to -o - or a file)\n"
    "  --rate R              resample the output to R Hz (libsoxr, high quality)\n"
    "  --float               32-bit float WAV (values are not clipped)\n"
    "  --text                read a text frame stream\n"
    "  --format EXT          wav, flac, ogg, opus, mp3 or npy, for outputs in a directory\n"
    "  --any-model           decode codes made with another model file anyway\n"
    "  --offline             decode each file whole (the reference's offline path)\n"
    "  --group N             with --offline, files per library call (default 32 with\n"
    "                        --backend cuda, else 1)\n"
    "  -j, --jobs N          files decoded at once (default 1)\n"
    "  --threads N           threads inside each decoder step (default: the CPUs, up to 8)\n"
    ENGINE_OPTIONS
    "  --json                a JSON summary of every file on stdout\n"
    "  -q, --quiet           no notes, summaries or progress bar\n"
    "  -h, --help            this text\n"
    "\n"
    "examples:\n"
    "  mimi decode speech.safetensors -o decoded.flac\n"
    "  mimi decode --rate 48000 codes.npy -o decoded.opus\n"
    "  mimi decode --jobs 4 codes/*.safetensors -o audio/\n"
    "  mimi decode --model pocket.safetensors latents.npy -o decoded.wav\n"
    "  ... | mimi decode --raw s16le - -o - | aplay -q -f S16_LE -r 24000 -c 1 -t raw\n";

// ---- mimi roundtrip --help ----

const char USAGE_ROUNDTRIP[] =
    "usage: mimi roundtrip [options] INPUT [-o OUTPUT]\n"
    "\n"
    "Encodes and decodes INPUT in one pass, frame by frame (streaming), and prints its duration,\n"
    "the bitrate (log2(codebook size) x codebooks x 12.5 frames/s: 11 x 8 x 12.5 = 1100 bit/s by\n"
    "default), the real-time factor (processing time / audio duration) and the SNR of the\n"
    "decoded audio against the input after downmix and resampling to 24 kHz. With -o, the\n"
    "decoded audio is written too (formats as for decode; -o - for s16le PCM on stdout).\n"
    "With a Pocket TTS model the frames are continuous latents: the bitrate line becomes\n"
    "\"continuous latents, 32 floats x 12.5 Hz\" and --codebooks does not apply.\n"
    "\n"
    "options:\n"
    "  -o, --output PATH     also write the decoded audio\n"
    "  --model FILE          Mimi or Pocket TTS checkpoint (.safetensors); default: $MIMI_MODEL\n"
    "  --codebooks N         codebooks per frame (default 8)\n"
    "  --raw s16le|f32le     headerless PCM input (INPUT '-' for stdin), and output with -o\n"
    "  --rate R              the rate of --raw input; without --raw, the output's rate\n"
    "  --channels C          channel count of --raw input (default 1)\n"
    "  --float               32-bit float WAV output\n"
    "  --threads N           threads inside each codec step (default: the CPUs, up to 8)\n"
    ENGINE_OPTIONS
    "  --json                the report as JSON on stdout\n"
    "  -q, --quiet           no notes or progress bar\n"
    "  -h, --help            this text\n"
    "\n"
    "examples:\n"
    "  mimi roundtrip speech.mp3\n"
    "  mimi roundtrip --codebooks 32 speech.flac -o decoded.wav\n";

// ---- mimi info --help ----

const char USAGE_INFO[] =
    "usage: mimi info [options] FILE...\n"
    "\n"
    "Describes each FILE on stdout:\n"
    "  a model:      naming scheme (kyutai, huggingface or pocket-tts), family, tensor dtypes,\n"
    "                sample rate, frame size, codebooks and codebook size (or latent size),\n"
    "                parameter count, file size and XXH64 (the value `xxh64sum FILE` prints;\n"
    "                codes files record it)\n"
    "  a codes file: shape, dtype, duration, bitrate, code range and metadata\n"
    "  latents:      shape, dtype, duration, value range and metadata\n"
    "  audio:        format, sample rate, channels, length\n"
    "\n"
    "options:\n"
    "  --json                one JSON array of objects instead of text\n"
    "  -q, --quiet           no notes\n"
    "  -h, --help            this text\n"
    "\n"
    "examples:\n"
    "  mimi info tokenizer-e351c8d8-checkpoint125.safetensors\n"
    "  mimi info --json speech.safetensors\n";

// ---- mimi synth --help ----

const char USAGE_SYNTH[] =
    "usage: mimi synth [options] -o MODEL.safetensors\n"
    "\n"
    "Writes the synthetic Mimi model: the full geometry of the released checkpoint, with\n"
    "deterministic untrained weights made from the seed. It runs exactly like a real model, for\n"
    "tests and benchmarks, but does not produce meaningful audio.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE        the .safetensors file to write (required)\n"
    "  --seed S                 weight seed, a non-negative integer (default 0)\n"
    "  --naming kyutai|hf|pocket  tensor names of Kyutai's checkpoint or of Hugging Face\n"
    "                           transformers (default kyutai); pocket: Pocket TTS's lighter\n"
    "                           Mimi with continuous latents (for `mimi info` and the tests)\n"
    "  --dtype f32|f16|bf16     tensor type (default f32)\n"
    "  -q, --quiet              no summary line\n"
    "  -h, --help               this text\n"
    "\n"
    "example:\n"
    "  mimi synth --seed 0 --dtype bf16 -o synthetic.safetensors\n";
