"""Batch keys, named once. Rollouts are TensorDicts, time-major `[T, N, ...]`."""

# observation entries (inside OBS / NEXT_OBS)
STATE = "state"  # float [N, D] proprioception + task state
PRIVILEGED = "privileged"  # float [N, P] simulator-only state for an asymmetric critic
IMAGES = "images"  # nested: images/<camera> uint8 [N, H, W, 3]
LANGUAGE = "language"  # uint8 [N, L] UTF-8 bytes, zero-padded (see embodied.specs.encode_text)
TOKENS = "tokens"  # int64 [B, T] a language model's token trajectory, right padded (embodied/text_rollout.py)
ATTENTION = "attention"  # bool [B, T] True on a token trajectory's real tokens

# transition entries
OBS = "obs"
NEXT_OBS = "next_obs"
ACTION = "action"
REWARD = "reward"
TERMINATED = "terminated"
TRUNCATED = "truncated"
DONE = "done"
LOG_PROB = "log_prob"
VALUE = "value"
ADVANTAGE = "advantage"
RETURN = "return"
MASK = "mask"  # bool, True where an entry is real (not padding)
IS_INTERVENTION = "is_intervention"
SUCCESS = "success"
GROUP = "group"  # int64 [B]: rollouts sharing an initial state / prompt (GRPO, RLOO)
POLICY_VERSION = "policy_version"  # int64: the learner's update count of the weights that collected the entry
STALENESS = "staleness"  # int64: updates the learner made since those weights (0: on-policy; cluster.max_staleness)
EXTRAS = "extras"  # whatever Policy.evaluate needs besides obs and action
REF_LOG_PROB = "ref_log_prob"  # log-probs under a frozen reference policy (KL term)
MC_RETURN = "mc_return"  # float [B]: discounted return-to-go of the episode from this step (Cal-QL)
LABEL = "label"  # int [B]: an operator's verdict on the episode, one of the values below
NO_LABEL, FAILURE_LABEL, SUCCESS_LABEL = -1, 0, 1

# operator events: what a teleop device (real_robot/teleop) reports and sessions and `embodied record --teleop` act on
TAKEOVER, RELEASE, SUCCESS_EVENT, FAILURE_EVENT, REWIND, QUIT = "takeover", "release", "success", "failure", "rewind", "quit"
