"""A success classifier trained from the frames an operator labelled, that rewards and ends episodes.

    frames, labels, episode = labelled_frames(store)                      # from a correction session's store
    classifier, report = train_classifier(frames, labels, episode)
    save_classifier(classifier, path); classifier = load_classifier(path)
    env = ClassifierReward(env, classifier)     # reward 1 and the episode ends once p(success) > threshold

HIL-SERL (Luo et al. 2024, Sec. III-B) replaces a hand-written reward on a real robot by a binary
classifier over observations, trained on frames the operator marked as success or failure, and ends
an episode when it fires. Here the labels come from an episode store: a correction session's
(`embodied.hil.session`) or `embodied record --teleop`'s `label` (the keys pressed), else a recorded store's
`success` (`embodied record`: the sim's success at each step; an episode's outcome is its last row's). In an episode labelled success the last
`success_frames` rows are positives; every row of an episode labelled failure is a negative, and
so are the rows of a success episode older than `2 * success_frames` (the rows in between are
ambiguous, the task nearly done, and are left out). Rows a rewind abandoned and unlabelled episodes
are not used. The network is the policies' observation encoder (normalized state, plus a small CNN
per camera) and an MLP giving one logit; validation is on held-out episodes, not frames.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tensordict import TensorDict
from torch import nn

from embodied import keys, registry
from embodied.config import check
from embodied.envs import VecEnv
from embodied.keys import FAILURE_LABEL, SUCCESS_LABEL
from embodied.specs import Spec


@dataclass(frozen=True)
class RewardClassifierConfig:
    hidden: tuple[int, ...] = (256, 256)  # MLP after the observation encoder (HIL-SERL's head: 256 units)
    # the state dimensions it reads; None = all. Success is usually a function of a few task features (HIL-SERL's
    # classifier reads only camera images): with a few hundred labelled frames an MLP over every dimension latches
    # onto episode-specific ones. Arm reach, 160 episodes: held-out precision / recall 0.62 / 0.49 on all 26
    # dimensions, 0.92 / 1.00 on the 3 goal-offset ones (tests/hil/test_reward_classifier.py)
    state_indices: tuple[int, ...] | None = None
    image_features: int = 64  # CNN features per camera
    lr: float = 3e-4  # Adam step (HIL-SERL's classifier uses Adam at 3e-4)
    batch_size: int = 256
    updates: int = 2000
    val_fraction: float = 0.2  # share of episodes held out for validation
    success_frames: int = 5  # last rows of a success episode that count as success
    threshold: float = 0.5  # p(success) above which the classifier fires
    seed: int = 0

    def __post_init__(self):
        check(self.lr > 0 and self.batch_size >= 1 and self.updates >= 1, "classifier lr, batch_size, updates must be > 0")
        check(0.0 <= self.val_fraction < 1.0, f"classifier val_fraction={self.val_fraction} must be in [0, 1)")
        check(self.success_frames >= 1, f"classifier success_frames={self.success_frames} must be >= 1")
        check(0.0 < self.threshold < 1.0, f"classifier threshold={self.threshold} must be in (0, 1)")


class RewardClassifier(nn.Module):
    """obs TensorDict [B] -> success logit [B]."""

    def __init__(self, observation_spec: dict[str, Spec], config: RewardClassifierConfig = RewardClassifierConfig()):
        super().__init__()
        self.config = config
        self.observation_spec = {k: v for k, v in observation_spec.items()
                                 if k == keys.STATE or k.startswith(keys.IMAGES + "/")}
        self.indices = None if config.state_indices is None else list(config.state_indices)
        inputs = dict(self.observation_spec)
        if self.indices is not None:
            width = self.observation_spec[keys.STATE].shape[0]
            if not all(0 <= i < width for i in self.indices):
                raise ValueError(f"classifier state_indices={config.state_indices} must lie in [0, {width})")
            inputs[keys.STATE] = Spec((len(self.indices),))
        self.encoder = registry.component("obs_encoder")(inputs, config.image_features)  # the policies' encoder
        self.head = registry.component("value_mlp")(self.encoder.dim, tuple(config.hidden))

    def forward(self, obs: TensorDict) -> torch.Tensor:
        return self.head(self.encoder(self.inputs(obs))).squeeze(-1)

    def inputs(self, obs: TensorDict) -> TensorDict:
        """The entries it reads: state (the chosen dimensions) and camera images."""
        state = obs[keys.STATE].float()
        picked = {keys.STATE: state if self.indices is None else state[..., self.indices]}
        picked.update({k: obs[tuple(k.split("/"))] for k in self.observation_spec if k != keys.STATE})
        return TensorDict(picked, batch_size=obs.batch_size).unflatten_keys("/")

    @torch.no_grad()
    def success(self, obs: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        """(p(success) [B], fired bool [B])."""
        p = torch.sigmoid(self(obs))
        return p, p > self.config.threshold


def labelled_frames(store, success_frames: int = 5) -> tuple[TensorDict, torch.Tensor, torch.Tensor]:
    """(observations [M], labels float [M], episode index [M]) from an episode store: each episode's `label` (a
    correction session, `embodied record --teleop`), or without one its last row's `success` (`embodied record`)."""
    obs_keys = [k for k in store.keys if k == f"{keys.OBS}/{keys.STATE}" or k.startswith(f"{keys.OBS}/{keys.IMAGES}/")]
    outcome = "label" if "label" in store.keys else keys.SUCCESS
    if f"{keys.OBS}/{keys.STATE}" not in obs_keys or outcome not in store.keys:
        raise KeyError("labelled_frames needs obs/state and each episode's outcome (label: a correction session, "
                       f"embodied record --teleop; or success: embodied record); the store has {store.keys}")
    rows, labels, episodes = [], [], []
    for i in range(store.num_episodes):
        start, stop = store.episode_range(i)
        if outcome == "label":
            label = int(store.read("label", start, start + 1)[0])
        else:
            label = SUCCESS_LABEL if bool(store.read(keys.SUCCESS, stop - 1, stop)[0]) else FAILURE_LABEL
        if label not in (SUCCESS_LABEL, FAILURE_LABEL):
            continue
        kept = np.arange(start, stop)
        if "rewound" in store.keys:
            kept = kept[~store.read("rewound", start, stop).astype(bool)]
        y = np.zeros(len(kept), np.float32)
        if label == SUCCESS_LABEL:
            y[-success_frames:] = 1.0
            keep = np.ones(len(kept), bool)
            keep[-2 * success_frames : -success_frames] = False  # nearly done: ambiguous
            kept, y = kept[keep], y[keep]
        rows.append(kept)
        labels.append(y)
        episodes.append(np.full(len(kept), i))
    if not rows:
        raise ValueError("the store has no episode labelled success or failure (press y / n to label them)")
    index = np.concatenate(rows)
    obs = {k.removeprefix(f"{keys.OBS}/"): torch.from_numpy(store.gather(k, index)) for k in obs_keys}
    frames = TensorDict(obs, batch_size=[len(index)]).unflatten_keys("/")
    return frames, torch.from_numpy(np.concatenate(labels)), torch.from_numpy(np.concatenate(episodes))


def train_classifier(frames: TensorDict, labels: torch.Tensor, episode: torch.Tensor,
                     config: RewardClassifierConfig = RewardClassifierConfig(),
                     progress: bool = False) -> tuple[RewardClassifier, dict[str, float]]:
    """Fit on the training episodes; report accuracy, precision and recall on the held-out ones."""
    observation_spec = {k: Spec(tuple(v.shape[1:]), v.dtype) for k, v in frames.flatten_keys("/").items()}
    generator = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)
    ids = episode.unique()
    held = ids[torch.randperm(len(ids), generator=generator)[: int(round(config.val_fraction * len(ids)))]]
    val = torch.isin(episode, held)
    train = ~val
    positives = float(labels[train].sum())
    if positives == 0 or positives == float(train.sum()):
        raise ValueError(f"the training episodes hold {int(positives)} success frames of {int(train.sum())}: "
                         "label both successes (y) and failures (n)")
    model = RewardClassifier(observation_spec, config)
    model.encoder.state_norm.fit(model.inputs(frames[train])[keys.STATE], "mean_std")
    # class balance: the few success frames weigh as much as the many others (HIL-SERL balances its batches)
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=torch.tensor((float(train.sum()) - positives) / positives))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    train_idx = train.nonzero().squeeze(-1)
    steps = range(config.updates)
    if progress:
        from rich.progress import track

        steps = track(steps, description="reward classifier")
    for _ in steps:
        batch = train_idx[torch.randint(len(train_idx), (config.batch_size,), generator=generator)]
        loss = loss_fn(model(frames[batch]), labels[batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    report = {"train_frames": int(train.sum()), "train_success_frames": int(positives), "loss": float(loss.detach())}
    if val.any():
        _, fired = model.success(frames[val])
        truth = labels[val].bool()
        report.update({
            "val_frames": int(val.sum()), "val_accuracy": float((fired == truth).float().mean()),
            "val_precision": float((fired & truth).sum() / fired.sum().clamp(min=1)),
            "val_recall": float((fired & truth).sum() / truth.sum().clamp(min=1)),
        })
    return model, report


def save_classifier(model: RewardClassifier, path: str | Path) -> None:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path / "classifier.safetensors")
    spec = {k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")} for k, v in model.observation_spec.items()}
    (path / "classifier.json").write_text(json.dumps({"config": asdict(model.config), "observation_spec": spec}, indent=1))


def load_classifier(path: str | Path) -> RewardClassifier:
    path = Path(path)
    if not (path / "classifier.json").exists():
        raise FileNotFoundError(f"no reward classifier at {path} (classifier.json and classifier.safetensors)")
    meta = json.loads((path / "classifier.json").read_text())
    config = meta["config"]
    config["hidden"] = tuple(config["hidden"])
    if config["state_indices"] is not None:
        config["state_indices"] = tuple(config["state_indices"])
    spec = {k: Spec(tuple(v["shape"]), getattr(torch, v["dtype"])) for k, v in meta["observation_spec"].items()}
    model = RewardClassifier(spec, RewardClassifierConfig(**config))
    model.load_state_dict(load_file(path / "classifier.safetensors"))
    return model.eval()


class ClassifierReward(VecEnv):
    """Wraps a one-env VecEnv (a robot): reward = 1 and the episode terminates with `success` when
    the classifier fires on the new observation; otherwise the env's own reward and ends. One env
    only, because the VecEnv contract has no per-env reset to end a single env of a batch."""

    def __init__(self, env: VecEnv, classifier: RewardClassifier):
        if env.num_envs != 1:
            raise ValueError(f"ClassifierReward ends episodes by resetting the env: it needs num_envs=1, got {env.num_envs}")
        missing = set(classifier.observation_spec) - set(env.observation_spec)
        if missing:
            raise ValueError(f"the classifier reads {sorted(missing)}, which the env does not observe "
                             f"({sorted(env.observation_spec)})")
        self.env, self.classifier = env, classifier.to(env.device)
        self.num_envs, self.device = 1, env.device
        self.observation_spec, self.action_spec = env.observation_spec, env.action_spec
        self.max_episode_steps = env.max_episode_steps

    def __getattr__(self, name):  # robot, adapter, rate statistics of a RobotEnv
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def _reset(self, seed: int | None, options: dict) -> tuple[TensorDict, dict]:
        return self.env.reset(seed=seed, options=options or None)

    def _step(self, action: torch.Tensor):
        obs, reward, terminated, truncated, info = self.env.step(action)
        done = terminated | truncated
        seen = info["final_obs"] if bool(done[0]) else obs  # the observation this action led to
        p, fired = self.classifier.success(seen)
        if bool(fired[0]) and not bool(done[0]):
            info = {**info, "final_obs": obs}
            obs, _ = self.env.reset()
        if bool(fired[0]):
            reward = torch.ones_like(reward)
            terminated = terminated | fired
            truncated = truncated & ~fired
            info = {**info, keys.SUCCESS: fired.clone()}
        info["classifier_p"] = p
        return obs, reward, terminated, truncated, info

    def get_state(self) -> dict[str, torch.Tensor]:
        return self.env.get_state()

    def set_state(self, state: dict[str, torch.Tensor]) -> TensorDict:
        return self.env.set_state(state)

    def close(self) -> None:
        self.env.close()
