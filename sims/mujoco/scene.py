"""The scene as MJCF, built in-repo: a Franka Emika Panda on a table, a cube and a target.

Kinematics, joint limits, masses, inertias, armature, damping and actuator gains are
those of MuJoCo Menagerie's `franka_emika_panda/panda.xml` (Apache-2.0,
github.com/google-deepmind/mujoco_menagerie); their link frames follow Franka's
published DH table (frankaemika.github.io/docs/control_parameters.html) and the
inertial values come from Gaz et al. 2019, "Dynamic Identification of the Franka
Emika Panda Robot With Retrieval of Feasible Parameters Using Penalty-Based
Optimization". Meshes are replaced by capsules and boxes (no asset files), the
fingers get their own position actuators instead of a tendon and an equality, and
the arm bodies get gravity compensation, as Franka's own controller applies it
(libfranka adds gravity to every commanded torque), so a position target holds
without sagging.

The layout follows ManiSkill3's TableSceneBuilder and PushCube/PickCube tasks: table
top at z = 0, robot base at x = -0.615, a cube of half-size 0.02 m, objects spawned
in x, y in [-0.1, 0.1].

Contacts are limited to what the tasks need, for speed: table <-> hand, fingers and
cube; cube <-> hand and fingers. The arm links above the hand are visual only. The cube's
geom has priority, so its (randomizable) friction is the one every cube contact uses.
"""

from __future__ import annotations

import math

# (name, pos, quat) of each link body relative to its parent, joint axis = local z (Menagerie panda.xml)
LINKS = (
    ("link1", (0, 0, 0.333), (1, 0, 0, 0)),
    ("link2", (0, 0, 0), (1, -1, 0, 0)),
    ("link3", (0, -0.316, 0), (1, 1, 0, 0)),
    ("link4", (0.0825, 0, 0), (1, 1, 0, 0)),
    ("link5", (-0.0825, 0.384, 0), (1, -1, 0, 0)),
    ("link6", (0, 0, 0), (1, 1, 0, 0)),
    ("link7", (0.088, 0, 0), (1, 1, 0, 0)),
)
HAND_POS = (0, 0, 0.107)  # flange, link7 frame (Menagerie "link8")
HAND_QUAT = (0.9238795, 0, 0, -0.3826834)  # -45 deg about z
TCP_OFFSET = 0.1034  # m, flange to the point between the fingertips (Franka docs, "F_T_EE")
FINGER_OFFSET = 0.0584  # m, hand frame to the finger joints (Menagerie)
FINGER_MAX = 0.04  # m, each finger's travel: 8 cm maximum opening (Franka Hand datasheet)
# Panda joint limits, rad (Franka docs, "Limits for Panda")
JOINT_LOWER = (-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973)
JOINT_UPPER = (2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973)
# ManiSkill3's Panda rest keyframe: gripper pointing down, fingers across the y axis
HOME_QPOS = (0.0, math.pi / 8, 0.0, -5 * math.pi / 8, 0.0, 3 * math.pi / 4, math.pi / 4)
# mass (kg), centre of mass, full inertia (Ixx Iyy Izz Ixy Ixz Iyz) per link (Menagerie, from Gaz et al. 2019)
INERTIALS = (
    (4.970684, (0.003875, 0.002081, -0.04762), (0.70337, 0.70661, 0.009117, -0.000139, 0.006772, 0.019169)),
    (0.646926, (-0.003141, -0.02872, 0.003495), (0.007962, 0.02811, 0.025995, -0.003925, 0.010254, 0.000704)),
    (3.228604, (0.027518, 0.039252, -0.066502), (0.037242, 0.036155, 0.01083, -0.004761, -0.011396, -0.012805)),
    (3.587895, (-0.05317, 0.104419, 0.027454), (0.025853, 0.019552, 0.028323, 0.007796, -0.001332, 0.008641)),
    (1.225946, (-0.011953, 0.041065, -0.038437), (0.035549, 0.029474, 0.008627, -0.002117, -0.004037, 0.000229)),
    (1.666555, (0.060149, -0.014117, -0.010517), (0.001964, 0.004354, 0.005433, 0.000109, -0.001158, 0.000341)),
    (0.735522, (0.010517, -0.004252, 0.061597), (0.012516, 0.010027, 0.004815, -0.000428, -0.001196, -0.000741)),
)
# position-servo stiffness (N m/rad) and force limit (N m) per joint; damping = stiffness / 10 (Menagerie)
KP = (4500, 4500, 3500, 3500, 2000, 2000, 2000)
FORCE_LIMIT = (87, 87, 87, 87, 12, 12, 12)  # Franka docs, joint torque limits
# capsule (fromto, radius) per link, in the link's frame: a rough outline of Franka's meshes
LINK_SHAPES = (
    ((0, 0, -0.19, 0, 0, -0.03), 0.06),
    ((0, 0, 0, 0, -0.22, 0), 0.06),
    ((0, 0, -0.12, 0.0825, 0, 0), 0.055),
    ((0, 0, 0, -0.0825, 0.1, 0), 0.055),
    ((0, 0, -0.25, 0, 0, -0.03), 0.045),
    ((0, 0, 0, 0.088, 0, 0), 0.045),
    ((0, 0, 0, 0, 0, 0.08), 0.04),
)
BASE_POS = (-0.615, 0.0, 0.0)  # ManiSkill3 TableSceneBuilder
CUBE_HALF = 0.02  # m, ManiSkill3 PushCube/PickCube
CUBE_DENSITY = 1000.0  # kg/m^3 (ManiSkill3's default), 0.064 kg
TIMESTEP = 0.004  # s; the stiffest servo (joint 7: 2000 N m/rad on ~0.11 kg m^2) has w*dt = 0.55, stable
# "side" looks along -y at the reach targets' height: with "front" (which looks down along -x, so a point in
# the air is ambiguous along its ray: up to 0.37 m within the reach target box) it triangulates a goal in the air
CAMERAS = ("front", "wrist", "side")


def _v(x) -> str:
    return " ".join(f"{c:g}" for c in x)


def _arm(depth: int = 0) -> str:
    if depth == len(LINKS):
        return _hand()
    name, pos, quat = LINKS[depth]
    mass, com, inertia = INERTIALS[depth]
    fromto, radius = LINK_SHAPES[depth]
    return f"""
<body name="{name}" pos="{_v(pos)}" quat="{_v(quat)}" gravcomp="1">
  <inertial mass="{mass}" pos="{_v(com)}" fullinertia="{_v(inertia)}"/>
  <joint name="joint{depth + 1}" range="{JOINT_LOWER[depth]} {JOINT_UPPER[depth]}"/>
  <geom class="link" fromto="{_v(fromto)}" size="{radius}"/>
  {_arm(depth + 1)}
</body>"""


def _finger(side: str, quat: str) -> str:
    # pad on the inner face, fingertip 0.053 m past the finger joint (Franka Hand drawing)
    return f"""
<body name="{side}_finger" pos="0 0 {FINGER_OFFSET}" quat="{quat}" gravcomp="1">
  <inertial mass="0.015" pos="0 0 0" diaginertia="2.375e-6 2.375e-6 7.5e-7"/>
  <joint name="finger_{side}" type="slide" axis="0 1 0" range="0 {FINGER_MAX}"/>
  <geom class="gripper" type="box" pos="0 0.007 0.035" size="0.01 0.007 0.018" friction="1.5 0.01 0.001"/>
  <site name="{side}_pad" type="box" pos="0 0.002 0.035" size="0.012 0.004 0.02" rgba="0 0 0 0"/>
</body>"""


def _hand() -> str:
    return f"""
<body name="hand" pos="{_v(HAND_POS)}" quat="{_v(HAND_QUAT)}" gravcomp="1">
  <inertial mass="0.73" pos="-0.01 0 0.03" diaginertia="0.001 0.0025 0.0017"/>
  <geom class="gripper" type="box" pos="0 0 0.03" size="0.02 0.1 0.025"/>
  <site name="tcp" pos="0 0 {TCP_OFFSET}" size="0.005" rgba="1 0 0 0"/>
  <camera name="wrist" pos="0.05 0 0" xyaxes="0 1 0 0.94 0 0.34" fovy="75"/>
  {_finger("left", "1 0 0 0")}
  {_finger("right", "0 0 0 1")}
</body>"""


def scene_xml() -> str:
    """The whole scene as an MJCF string."""
    actuators = "\n".join(
        f'<general joint="joint{i + 1}" gainprm="{kp}" biasprm="0 -{kp} -{kp / 10:g}" '
        f'ctrlrange="{JOINT_LOWER[i]} {JOINT_UPPER[i]}" forcerange="-{FORCE_LIMIT[i]} {FORCE_LIMIT[i]}"/>'
        for i, kp in enumerate(KP)
    )
    # per-finger servo: the Franka Hand's 70 N continuous grip force (datasheet) shared by two fingers
    fingers = "\n".join(
        f'<general joint="finger_{s}" gainprm="100" biasprm="0 -100 -10" ctrlrange="0 {FINGER_MAX}" '
        'forcerange="-35 35"/>'
        for s in ("left", "right")
    )
    return f"""
<mujoco model="panda_table">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{TIMESTEP}" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <visual>
    <quality shadowsize="0" offsamples="0"/>
    <global offwidth="256" offheight="256"/>
  </visual>
  <default>
    <joint armature="0.1" damping="1" axis="0 0 1"/>
    <general dyntype="none" biastype="affine"/>
    <default class="link"><geom type="capsule" contype="0" conaffinity="0" rgba="0.92 0.92 0.95 1"/></default>
    <default class="gripper"><geom contype="2" conaffinity="1" rgba="0.25 0.25 0.25 1"/></default>
  </default>
  <asset>
    <texture name="grid" type="2d" builtin="checker" width="64" height="64" rgb1="0.55 0.45 0.35" rgb2="0.5 0.4 0.3"/>
    <material name="table" texture="grid" texrepeat="8 8"/>
  </asset>
  <worldbody>
    <light name="key" pos="0.3 -0.5 1.5" dir="-0.2 0.3 -1" diffuse="0.8 0.8 0.8" directional="false"/>
    <light name="fill" pos="-0.5 0.5 1.2" dir="0.3 -0.3 -1" diffuse="0.3 0.3 0.3"/>
    <geom name="floor" type="plane" pos="0 0 -0.75" size="2 2 0.1" rgba="0.3 0.3 0.35 1" contype="0" conaffinity="0"/>
    <geom name="table" type="box" pos="-0.12 0 -0.02" size="0.7 0.6 0.02" material="table" contype="1" conaffinity="0"/>
    <camera name="front" pos="0.55 0 0.45" xyaxes="0 1 0 -0.6 0 0.8" fovy="50"/>
    <camera name="side" pos="0 0.7 0.2" xyaxes="-1 0 0 0 0 1" fovy="50"/>
    <body name="base" pos="{_v(BASE_POS)}">
      <geom type="cylinder" pos="0 0 0.05" size="0.08 0.05" contype="0" conaffinity="0" rgba="0.92 0.92 0.95 1"/>
      {_arm()}
    </body>
    <body name="cube" pos="0 0 {CUBE_HALF}">
      <freejoint name="cube"/>
      <geom name="cube" type="box" size="{CUBE_HALF} {CUBE_HALF} {CUBE_HALF}" density="{CUBE_DENSITY}"
            contype="4" conaffinity="3" rgba="0.85 0.15 0.1 1" friction="1 0.01 0.001" priority="1"/>
    </body>
    <body name="target" mocap="true" pos="0.1 0 0.2">
      <geom name="target" type="sphere" size="0.02" contype="0" conaffinity="0" rgba="0.1 0.8 0.2 0.6"/>
    </body>
  </worldbody>
  <actuator>
    {actuators}
    {fingers}
  </actuator>
  <sensor>
    <touch name="left_touch" site="left_pad"/>
    <touch name="right_touch" site="right_pad"/>
  </sensor>
</mujoco>"""


def build_model():
    """The compiled MjModel of `scene_xml()`."""
    import mujoco

    return mujoco.MjModel.from_xml_string(scene_xml())
